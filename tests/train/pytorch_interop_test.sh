#!/bin/sh
# The Python lines in train/checkpoint.md load a mantissa MLP checkpoint into the equivalent PyTorch module
# with a strict load_state_dict (every name and shape PyTorch's). This runs those exact lines on a
# checkpoint mantissa-train just wrote, then checks the loaded weights against the file.
# scripts/install-deps.sh installs both (python3-torch, python3-h5py), so CI (CI=true) fails without them;
# elsewhere the test exits 77 (skipped) when /usr/bin/python3 lacks torch or h5py. Written for Debian's
# torch 1.13 and any later one.
#   pytorch_interop_test.sh PATH/TO/mantissa-train PATH/TO/checkpoint.md
set -u
prog=$1 doc=$2
if ! /usr/bin/python3 -c 'import torch, h5py' 2>/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "FAILED: python3 torch/h5py not installed, but scripts/install-deps.sh installs them (python3-torch, python3-h5py)"
    exit 1
  fi
  echo "python3 torch/h5py not installed: skipped (scripts/install-deps.sh installs them)"
  exit 77
fi
/usr/bin/python3 -c 'import torch; print("torch", torch.__version__)'
work=$(mktemp -d "${TMPDIR:-/tmp}/pytorch_interop_test.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$prog" --data=synthetic --mlp_hidden=256 --max_steps=3 --eval_batches=1 --progress=none \
  --checkpoint_dir="$work/runs/a" >"$work/train.out" 2>&1 || { cat "$work/train.out"; exit 1; }
mv "$work/runs/a/step_3.h5" "$work/runs/a/step_400.h5"
# The documented snippet, verbatim, run from $work so that its path "runs/a/step_400.h5" resolves.
sed -n '/^```python$/,/^```$/p' "$doc" | sed '1d;$d' >"$work/snippet.py"
[ -s "$work/snippet.py" ] || { echo "no python snippet in $doc"; exit 1; }
cat >>"$work/snippet.py" <<'PY'
with h5py.File("runs/a/step_400.h5", "r") as f:
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, torch.from_numpy(f["model"][name][()])), name
print("loaded into PyTorch:", ", ".join(f"{n} {tuple(t.shape)}" for n, t in model.state_dict().items()))
PY
cd "$work" && /usr/bin/python3 snippet.py
