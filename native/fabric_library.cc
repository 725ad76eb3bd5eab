// See fabric_library.h.
#include "fabric_library.h"

#include <dlfcn.h>

namespace weft::fab {

int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**) = nullptr;
void (*freeinfo)(fi_info*) = nullptr;
fi_info* (*dupinfo)(const fi_info*) = nullptr;
int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
const char* (*strerror)(int) = nullptr;
uint32_t (*version)() = nullptr;

namespace {

// libfabric versions its symbols: when struct fi_info grew, fi_getinfo@FABRIC_1.3 kept the
// old layouts under older version tags. A binary must call the version its headers describe.
// The prebuilt binaries are compiled against libfabric 1.17's headers, whose layouts are
// these versions; a newer libfabric still exports them. Built from source against other
// headers, the library present is the one the headers came with, so its default versions fit.
#if FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION == 17
constexpr const char* kGetinfo = "FABRIC_1.3";
constexpr const char* kFreeinfo = "FABRIC_1.3";
constexpr const char* kDupinfo = "FABRIC_1.3";
constexpr const char* kFabric = "FABRIC_1.1";
constexpr const char* kStrerror = "FABRIC_1.0";
constexpr const char* kVersion = "FABRIC_1.0";
#else
constexpr const char* kGetinfo = nullptr;
constexpr const char* kFreeinfo = nullptr;
constexpr const char* kDupinfo = nullptr;
constexpr const char* kFabric = nullptr;
constexpr const char* kStrerror = nullptr;
constexpr const char* kVersion = nullptr;
#endif

template <typename Fn>
bool Find(void* lib, const char* name, const char* tag, Fn*& out, std::string& why) {
  void* sym = tag ? dlvsym(lib, name, tag) : dlsym(lib, name);
  if (!sym) {
    why = std::string("libfabric.so.1 has no ") + name + (tag ? std::string("@") + tag : std::string()) +
          ": it is older than the libfabric " + std::to_string(FI_MAJOR_VERSION) + "." +
          std::to_string(FI_MINOR_VERSION) + " weft was built against; install a newer libfabric1 or rebuild weft from source (npm rebuild)";
    return false;
  }
  out = reinterpret_cast<Fn*>(sym);
  return true;
}

std::string OpenOnce() {
  // RTLD_LOCAL: libfabric's symbols stay out of the process's global scope (another addon
  // may bring its own libfabric); its loadable providers name libfabric.so.1 themselves.
  void* lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    std::string err = e ? e : "dlopen failed";
    // dlerror names the file that failed first: libfabric itself, or a library it needs.
    if (err.substr(0, err.find(':')).find("libfabric") == std::string::npos) {
      return "libfabric.so.1 is installed but a library it needs is missing (" + err +
             "); reinstall libfabric1 with its dependencies (Debian/Ubuntu: apt-get install --reinstall libfabric1)";
    }
    return "libfabric is not installed (" + err + "); install it (Debian/Ubuntu: apt-get install libfabric1) for the ofi provider";
  }
  std::string why;
  if (!Find(lib, "fi_getinfo", kGetinfo, getinfo, why) || !Find(lib, "fi_freeinfo", kFreeinfo, freeinfo, why) ||
      !Find(lib, "fi_dupinfo", kDupinfo, dupinfo, why) || !Find(lib, "fi_fabric", kFabric, fabric, why) ||
      !Find(lib, "fi_strerror", kStrerror, strerror, why) || !Find(lib, "fi_version", kVersion, version, why)) {
    getinfo = nullptr;
    return why;
  }
  uint32_t v = version();
  if (v < FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)) {
    getinfo = nullptr;
    return "libfabric " + std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)) + " is installed; weft was built against " +
           std::to_string(FI_MAJOR_VERSION) + "." + std::to_string(FI_MINOR_VERSION) +
           " and needs at least that: install a newer libfabric1 or rebuild weft from source (npm rebuild)";
  }
  return "";
}

}  // namespace

const std::string& Open() {
  // The library stays open for the life of the process: endpoints hold pointers into it.
  static const std::string why = OpenOnce();
  return why;
}

}  // namespace weft::fab
