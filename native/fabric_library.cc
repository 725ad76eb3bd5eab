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
// old layouts under older version tags, and a later libfabric moves the default on again.
// A binary must call the versions its headers describe, which linking with -lfabric would have
// fixed. Built from source, scripts/gyp-fabric.mjs reads the default versions of the library
// the headers came with (WEFT_FI_INFO_MINOR, WEFT_FI_FABRIC_MINOR). The prebuilt binaries are
// cross-built against libfabric 1.17's headers, whose versions are these. fi_strerror and
// fi_version have only ever had FABRIC_1.0.
#if defined(WEFT_FI_INFO_MINOR) && defined(WEFT_FI_FABRIC_MINOR)
#define WEFT_STR2(x) #x
#define WEFT_STR(x) WEFT_STR2(x)
constexpr const char* kInfoTag = "FABRIC_1." WEFT_STR(WEFT_FI_INFO_MINOR);
constexpr const char* kFabricTag = "FABRIC_1." WEFT_STR(WEFT_FI_FABRIC_MINOR);
#elif FI_MAJOR_VERSION == 1 && FI_MINOR_VERSION == 17
constexpr const char* kInfoTag = "FABRIC_1.3";
constexpr const char* kFabricTag = "FABRIC_1.1";
#else
// Headers other than 1.17 with no library beside them at build time: the defaults of the
// library found at run time (right while it is the version the headers came with).
constexpr const char* kInfoTag = nullptr;
constexpr const char* kFabricTag = nullptr;
#endif
constexpr const char* kFirstTag = "FABRIC_1.0";

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
  if (!Find(lib, "fi_getinfo", kInfoTag, getinfo, why) || !Find(lib, "fi_freeinfo", kInfoTag, freeinfo, why) ||
      !Find(lib, "fi_dupinfo", kInfoTag, dupinfo, why) || !Find(lib, "fi_fabric", kFabricTag, fabric, why) ||
      !Find(lib, "fi_strerror", kFirstTag, strerror, why) || !Find(lib, "fi_version", kFirstTag, version, why)) {
    return why;
  }
  uint32_t v = version();
  if (v < FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)) {
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
