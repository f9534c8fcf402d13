// A fresh folder under the test temp dir (one per process: the pid is in its name), removed when the test ends.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

namespace mantissa::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_((std::filesystem::path(::testing::TempDir()) / (name + "." + std::to_string(getpid()))).string()) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace mantissa::testing
