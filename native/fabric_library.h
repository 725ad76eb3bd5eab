// libfabric, opened at run time. The fabric addon does not link libfabric: it opens
// libfabric.so.1 with dlopen when it loads, so one prebuilt weft_ofi.node serves machines
// with and without libfabric (without it, `ofi.available` is false and says why), and a
// cross build needs only libfabric's headers. Of the functions libfabric exports, the addon
// calls six; everything else it uses is an inline call through the ops tables of the objects
// these return, so these six are all it looks up.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <string>

namespace weft::fab {

// Opens libfabric.so.1 and looks the six functions up (once per process). Returns "" when
// they are ready, else a sentence saying what is missing and what to install.
const std::string& Open();

extern int (*getinfo)(uint32_t version, const char* node, const char* service, uint64_t flags,
                      const fi_info* hints, fi_info** info);
extern void (*freeinfo)(fi_info* info);
extern fi_info* (*dupinfo)(const fi_info* info);
extern int (*fabric)(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
extern const char* (*strerror)(int errnum);
extern uint32_t (*version)();

// fi_allocinfo() of the headers calls the fi_dupinfo symbol; this one goes through dupinfo.
inline fi_info* allocinfo() { return dupinfo(nullptr); }

}  // namespace weft::fab
