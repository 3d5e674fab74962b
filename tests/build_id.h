// The identity of the running test binary, for on-disk caches of outputs the
// code produced (warm starts, compare runs): a cache keyed on it is rebuilt
// whenever the binary changes, so an incremental build never checks outputs
// that older code wrote.
#pragma once

#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace rlid::testing {

namespace internal {

// Appends the hex of the GNU build-id note of the first object dl_iterate_phdr
// reports (the main program) to *static_cast<std::string*>(data).
inline int MainProgramBuildId(dl_phdr_info* info, size_t, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    // Notes are padded to the segment's alignment (4, or 8 for e.g. .note.gnu.property).
    const uintptr_t align = ph.p_align == 8 ? 8 : 4;
    auto pad = [align](uintptr_t n) { return (n + align - 1) & ~(align - 1); };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const char* name = p + sizeof(ElfW(Nhdr));
      const char* desc = name + pad(note->n_namesz);
      if (desc + note->n_descsz > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        char byte[3];
        for (uint32_t k = 0; k < note->n_descsz; ++k) {
          std::snprintf(byte, sizeof(byte), "%02x", static_cast<unsigned char>(desc[k]));
          out->append(byte);
        }
        return 1;
      }
      p = desc + pad(note->n_descsz);
    }
  }
  return 1;  // stop after the main program
}

}  // namespace internal

// Lowercase hex of the main program's GNU build-id (its .note.gnu.build-id),
// or "size-<bytes>-mtime-<s>.<ns>" of /proc/self/exe for a binary linked
// without one, or (when neither is readable) an id unique to this process, so
// that nothing cached by another binary is ever reused. Never empty.
inline std::string BuildId() {
  static const std::string id = [] {
    std::string hex;
    dl_iterate_phdr(&internal::MainProgramBuildId, &hex);
    if (!hex.empty()) return hex;
    struct stat st {};
    if (::stat("/proc/self/exe", &st) == 0)
      return "size-" + std::to_string(st.st_size) + "-mtime-" + std::to_string(st.st_mtim.tv_sec) +
             "." + std::to_string(st.st_mtim.tv_nsec);
    return "unknown-pid-" + std::to_string(::getpid());
  }();
  return id;
}

}  // namespace rlid::testing
