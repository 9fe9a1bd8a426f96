// Replays fuzz inputs without libFuzzer, so any compiler builds the fuzz
// target: `fuzz_replay [--max N] FILE_OR_DIR...` feeds every file
// (directories are read in name order, not recursively; at most N files) to
// LLVMFuzzerTestOneInput once. An invariant the target checks aborts the
// run; otherwise it prints what the inputs reached.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" void fmha_fuzz_stats(char* buf, size_t len);  // what the inputs reached

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  size_t max_files = SIZE_MAX;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--max" && i + 1 < argc) {
      max_files = std::stoul(argv[++i]);
      continue;
    }
    const fs::path arg = argv[i];
    if (fs::is_directory(arg)) {
      for (const fs::directory_entry& e : fs::directory_iterator(arg))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(arg);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.size() > max_files) files.resize(max_files);
  if (files.empty()) {
    std::fprintf(stderr, "fuzz_replay: no inputs (usage: fuzz_replay FILE_OR_DIR...)\n");
    return 1;
  }
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  char stats[512];
  fmha_fuzz_stats(stats, sizeof stats);
  std::printf("fuzz_replay: every invariant held over %s\n", stats);
  return 0;
}
