// mantissa-train: trains the MLP, CNN or GPT examples from the command line. Flags become RunOptions
// (train/run.h) through the flag table (train/run_flags.h); a bad flag or value exits with status 2 and a
// one-line reason, and so do ranks under mpirun that disagree (flags, checkpoint, model: one line on rank 0,
// every rank exits 2), a failing run (missing data, bad checkpoint) with status 1 and its message, a run stopped
// by SIGTERM, SIGINT or SIGUSR1 with 75 after its checkpoint (train/run.h). With no flags: the MLP on
// Fashion-MNIST in fp16.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <unistd.h>

#include "framework/dist/process_group.h"
#include "framework/error.h"
#include "train/mpi_launcher_env.h"
#include "train/rank_agreement.h"
#include "train/run.h"
#include "train/run_flags.h"
#include "train/stop.h"

namespace mantissa {
namespace {

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "mantissa-train: %s (see --help)\n", message.c_str());
  std::exit(kExitUsage);
}

void print_help() {
  std::printf(
      "usage: mantissa-train [--flag=value ...]\n"
      "Trains an example model. With no flags: the MLP on Fashion-MNIST in fp16.\n\n%s",
      flags_help().c_str());
}

// --name=value or --name value, each set as it comes (train/run_flags.h); --help prints the flags and exits.
// Anything else, an unknown name or a value that does not parse: exit 2.
RunOptions options_from_flags(int argc, char** argv) {
  RunOptions o;
  bool batch_size_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--helpfull") {
      print_help();
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--")
      usage_error("unexpected argument '" + std::string(arg) + "' (flags are --name=value)");
    arg.remove_prefix(2);
    const size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    std::string value;
    if (eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error("--" + name + " needs a value");
    }
    if (absl::Status s = set_flag(o, name, value); !s.ok()) usage_error(std::string(s.message()));
    if (name == "batch_size") batch_size_given = true;
  }
  if (batch_size_given && o.global_batch > 0) {
    usage_error("--batch_size and --global_batch: give one (--global_batch sets the batch on each rank)");
  }
  if (o.model == ModelKind::kGPT && !batch_size_given) o.batch_size = 32;  // 4,096 tokens per step
  return o;
}

// The program once the signals are taken: runs and returns the exit status.
int train(int argc, char** argv, StopRequest& stop) {
  const RunOptions options = options_from_flags(argc, argv);
  if (absl::Status s = validate(options); !s.ok()) usage_error(std::string(s.message()));
  // Under mpirun errors name their rank. A non-zero exit of any rank aborts the whole job (the MPI process
  // group does it at exit), so the other ranks end too instead of waiting for this one.
  const LaunchInfo launch = launch_info();
  const std::string who = launch.world_size > 1 ? "mantissa-train: rank " + std::to_string(launch.rank) + ": "
                                                : std::string("mantissa-train: ");
  try {
    absl::StatusOr<RunSummary> summary = run(options, stdout, &stop);
    if (!summary.ok() && is_agreed_error(summary.status())) {
      // The ranks disagree (their flags, their checkpoints, their models): every rank holds this same error,
      // decided by a collective that all of them passed. Rank 0 says it once; all end MPI in order rather
      // than abort the job. A set-up to fix is a usage error.
      if (launch.rank == 0) {
        std::fprintf(stderr, "mantissa-train: %s\n", std::string(summary.status().message()).c_str());
      }
      std::fflush(nullptr);
      finalize_process_groups();
      return summary.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage : kExitFailed;
    }
    if (!summary.ok()) {
      std::fprintf(stderr, "%s%s\n", who.c_str(), std::string(summary.status().message()).c_str());
      return kExitFailed;
    }
    if (summary->stopped) {
      const StopEvent& s = *summary->stopped;
      const std::string by = s.signal != 0 ? " by " + signal_name(s.signal) : std::string();
      if (launch.rank == 0) {
        const std::string saved = !s.checkpoint.empty()
                                      ? "checkpoint " + s.checkpoint + " written; resume with --resume=latest"
                                      : "nothing was saved (no --checkpoint_dir)";
        std::fprintf(stderr, "%sstopped%s at step %lld; %s\n", who.c_str(), by.c_str(), static_cast<long long>(s.step),
                     saved.c_str());
      }
      // Every rank stopped after the same step and passed its last collective: end MPI in order, so that
      // the status is not taken for a failure (which aborts the job).
      std::fflush(nullptr);
      finalize_process_groups();
      return kExitStopped;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s%s\n", who.c_str(), e.what());
    return kExitFailed;
  }
  return kExitFinished;
}

}  // namespace
}  // namespace mantissa

int main(int argc, char** argv) {
  using namespace mantissa;
  // OpenMP threads spin while they wait for the next parallel region: libgomp's default spin (300,000
  // rounds) starves the loader's worker thread and everything else on a busy machine (MLP f32 steps ran
  // at 1,000 samples/s instead of 4,300 at a load of 5 on 2 cores), and sleeping at once
  // (OMP_WAIT_POLICY=passive) costs 15-20% on an idle one (CNN bf16: 8,900 vs 10,800 samples/s). A short
  // spin keeps the idle speed. libgomp reads its variables once, when it is loaded, so the program sets
  // GOMP_SPINCOUNT and runs itself again; a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT is left as it is.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("GOMP_SPINCOUNT", "10000", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: then go on with the default policy
  }
  // From here SIGTERM, SIGINT and SIGUSR1 (what schedulers send before they kill a job) stop the run after
  // the step in progress, with a checkpoint. They are taken by a thread of their own (train/stop.h), so it
  // is made before any other thread starts (OpenMP, MPI, the loader): those inherit the signals blocked.
  StopRequest stop;
  StopOnSignals signals(stop);
  // exit() rather than a return: `signals` is never destroyed, so a signal that comes while the process
  // winds down after a stop is one more request, not a status 143 for a run that was saved.
  std::exit(train(argc, argv, stop));
}
