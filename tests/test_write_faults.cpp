// Fault injection on every output of the command-line tools: a file-size limit (ulimit -f,
// the same EFBIG path as a full disk's ENOSPC), /dev/full, and SIGTERM/SIGINT in the middle of
// a write. Each failure must exit non-zero naming the output, leave no output and no
// temporary behind, and a temporary left by a process that no longer runs must be removed by
// the next run writing that output (common/atomic_file.hpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "tests/support/paths.hpp"

namespace sluice {
namespace {

constexpr const char* kTemporaryTag = ".sluice-tmp-";

std::vector<std::string> temporaries_in(const std::string& directory) {
  std::vector<std::string> found;
  for (const auto& name : test::list_dir(directory))
    if (name.find(kTemporaryTag) != std::string::npos) found.push_back(name);
  return found;
}

bool is_character_device(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISCHR(info.st_mode);
}

// A dataset and plan (1024 vertices) shared by the tests, built without limits.
class WriteFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::ScratchDir();
    const auto generate = test::run_command(
        preprocess() + " generate --scale 10 --features 16 --classes 4 --seed 3 --output " +
        dir_->file("data.h5") + " --edges-output " + dir_->file("edges.bin") + " --quiet");
    ASSERT_EQ(generate.exit_code, 0) << generate.output;
    const auto partition = test::run_command(
        preprocess() + " partition --dataset " + dir_->file("data.h5") + " --output " +
        dir_->file("plan.h5") + " -p 2 -c 2 --partitioner range --quiet");
    ASSERT_EQ(partition.exit_code, 0) << partition.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string preprocess() { return test::bin("sluice-preprocess"); }
  static std::string train() {
    return test::bin("sluice-train") + " --dataset " + dir_->file("data.h5") + " --plan " +
           dir_->file("plan.h5") + " --threads 1 --no-progress --quiet";
  }
  // Runs `command` under a file-size limit of `blocks` (sh's ulimit -f) writing `output`;
  // expects a non-zero exit whose message names the output, `what` and the OS reason, and
  // neither the output nor a temporary left in `out_`.
  void expect_write_failure(const std::string& command, const std::string& output,
                            const std::string& what, int blocks = 8) {
    const auto r = test::run_command("ulimit -f " + std::to_string(blocks) + "; " + command);
    // 1 or 2: the tool's own error exit, not a crash (a signal shows as 128 + its number).
    EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << r.exit_code << " " << command << "\n"
                                                      << r.output;
    EXPECT_NE(r.output.find(output + ": cannot write " + what + ": File too large"),
              std::string::npos)
        << r.output;
    EXPECT_FALSE(test::file_exists(output)) << output;
    EXPECT_TRUE(temporaries_in(out_.path()).empty())
        << testing::PrintToString(temporaries_in(out_.path()));
  }
  static test::ScratchDir* dir_;
  test::ScratchDir out_;
};
test::ScratchDir* WriteFaults::dir_ = nullptr;

TEST_F(WriteFaults, GenerateDatasetOverFileSizeLimit) {
  const std::string output = out_.file("generated.h5");
  expect_write_failure(
      preprocess() + " generate --scale 12 --features 16 --quiet --output " + output, output,
      "dataset");
}

TEST_F(WriteFaults, GenerateRawEdgesOverFileSizeLimit) {
  for (const std::string name : {"edges.bin", "edges.txt"}) {
    const std::string output = out_.file(name);
    expect_write_failure(preprocess() + " generate --scale 12 --quiet --edges-output " + output,
                         output, "raw edges");
  }
}

TEST_F(WriteFaults, ImportOverFileSizeLimit) {
  const std::string output = out_.file("imported.h5");
  expect_write_failure(preprocess() + " import --format binary --input " + dir_->file("edges.bin") +
                           " --random-features 16 --random-labels 4 --quiet --output " + output,
                       output, "dataset");
}

TEST_F(WriteFaults, PartitionOverFileSizeLimit) {
  const std::string output = out_.file("plan.h5");
  expect_write_failure(preprocess() + " partition --dataset " + dir_->file("data.h5") +
                           " -p 2 -c 2 --partitioner range --quiet --output " + output,
                       output, "plan");
}

TEST_F(WriteFaults, EveryTrainingOutputOverFileSizeLimit) {
  struct Case {
    const char* option;
    const char* name;
    const char* what;
  };
  // 60 epochs make the report (one loss per epoch) larger than the limit.
  for (const Case& c :
       {Case{"--metrics", "metrics.jsonl", "metrics"}, Case{"--report", "report.json", "report"},
        Case{"--model-out", "model.h5", "model"},
        Case{"--checkpoint", "checkpoint.h5", "checkpoint"},
        Case{"--predictions", "predictions.csv", "predictions"},
        Case{"--trace", "trace.json", "trace"}}) {
    SCOPED_TRACE(c.option);
    const std::string output = out_.file(c.name);
    expect_write_failure(train() + " --epochs 60 " + c.option + " " + output, output, c.what, 2);
  }
}

TEST_F(WriteFaults, CheckpointEveryEpochOverFileSizeLimit) {
  const std::string output = out_.file("checkpoint.h5");
  expect_write_failure(train() + " --epochs 4 --checkpoint-every 1 --checkpoint " + output, output,
                       "checkpoint", 2);
}

TEST_F(WriteFaults, DevFullFailsAndStaysADevice) {
  if (!is_character_device("/dev/full")) GTEST_SKIP() << "/dev/full is not a device here";
  for (const std::string option : {"--report", "--metrics", "--predictions", "--model-out"}) {
    const auto r = test::run_command(train() + " --epochs 2 " + option + " /dev/full");
    EXPECT_NE(r.exit_code, 0) << option << "\n" << r.output;
    EXPECT_NE(r.output.find("/dev/full: cannot write"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
    EXPECT_TRUE(is_character_device("/dev/full")) << option << " replaced /dev/full";
  }
  const auto info = test::run_command("{ " + preprocess() + " info --json " +
                                      dir_->file("data.h5") + " > /dev/full; }");
  EXPECT_NE(info.exit_code, 0) << info.output;
  EXPECT_NE(info.output.find("cannot write standard output"), std::string::npos) << info.output;
  // A device that accepts writes is written in place, not replaced.
  const auto null = test::run_command(train() + " --epochs 2 --report /dev/null");
  EXPECT_EQ(null.exit_code, 0) << null.output;
  EXPECT_TRUE(is_character_device("/dev/null"));
}

// Starts `argv` with stdout/stderr to /dev/null, waits until a temporary appears in
// `directory`, sends `signal_number`, and returns the wait status.
int interrupt_mid_write(const std::vector<std::string>& argv, const std::string& directory,
                        int signal_number, bool* saw_temporary) {
  const pid_t child = fork();
  if (child == 0) {
    // As from an interactive shell: a test runner started in the background ignores SIGINT.
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  *saw_temporary = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!temporaries_in(directory).empty()) {
      *saw_temporary = true;
      kill(child, signal_number);
      break;
    }
    if (waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (!*saw_temporary) kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return status;
}

TEST_F(WriteFaults, SignalMidWriteRemovesTheTemporary) {
  // Scale 18 raw edges (4M pairs) are written block by block while they are drawn, so the
  // temporary exists for the whole run.
  for (const int signal_number : {SIGTERM, SIGINT}) {
    for (const std::string name : {"edges.txt", "edges.bin"}) {
      SCOPED_TRACE(name + " signal " + std::to_string(signal_number));
      const std::string output = out_.file(name);
      bool saw_temporary = false;
      const int status = interrupt_mid_write({preprocess(), "generate", "--scale", "18", "--quiet",
                                              "--threads", "1", "--edges-output", output},
                                             out_.path(), signal_number, &saw_temporary);
      ASSERT_TRUE(saw_temporary) << "the write ended before a temporary was seen";
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number)
          << "wait status " << status;
      EXPECT_FALSE(test::file_exists(output));
      EXPECT_TRUE(temporaries_in(out_.path()).empty())
          << testing::PrintToString(temporaries_in(out_.path()));
    }
  }
}

TEST_F(WriteFaults, NextRunRemovesLeftoversOfDeadProcesses) {
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const std::string output = out_.file("generated.h5");
  const std::string dead_leftover = temporary_name_for(output, long(dead));
  const std::string live_leftover = temporary_name_for(output, long(getpid()));
  const std::string other_leftover = temporary_name_for(out_.file("other.h5"), long(dead));
  for (const auto& path : {dead_leftover, live_leftover, other_leftover})
    test::write_text(path, "partial");
  const auto r =
      test::run_command(preprocess() + " generate --scale 8 --features 4 --output " + output);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::file_exists(output));
  EXPECT_FALSE(test::file_exists(dead_leftover)) << r.output;
  EXPECT_NE(r.output.find("removed " + dead_leftover), std::string::npos) << r.output;
  EXPECT_TRUE(test::file_exists(live_leftover)) << "a running process's temporary was removed";
  EXPECT_TRUE(test::file_exists(other_leftover)) << "another output's temporary was removed";
}

TEST(AtomicOutput, TemporaryIsHiddenBesideTheOutputAndRenamedOnCommit) {
  test::ScratchDir dir;
  const std::string path = dir.file("out.txt");
  {
    AtomicTextFile file(path, "text");
    file.stream() << "hello\n";
    EXPECT_EQ(temporaries_in(dir.path()),
              std::vector<std::string>{".out.txt.sluice-tmp-" + std::to_string(getpid())});
    EXPECT_FALSE(test::file_exists(path));
    file.commit();
  }
  EXPECT_TRUE(test::file_exists(path));
  EXPECT_TRUE(temporaries_in(dir.path()).empty());
  {
    AtomicTextFile file(dir.file("abandoned.txt"), "text");
    file.stream() << "never committed\n";
  }
  EXPECT_FALSE(test::file_exists(dir.file("abandoned.txt")));
  EXPECT_TRUE(temporaries_in(dir.path()).empty());
  EXPECT_THROW(AtomicOutput(dir.file("missing/out.txt")), InputError);
}

}  // namespace
}  // namespace sluice
