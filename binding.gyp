{
  "variables": {
    "have_ofi%": "<!(node scripts/gyp-fabric.mjs have)"
  },
  "target_defaults": {
    "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
    "defines": ["NAPI_VERSION=8", "NODE_ADDON_API_DISABLE_DEPRECATED", "NAPI_DISABLE_CPP_EXCEPTIONS"],
    "cflags_cc": ["-std=c++17", "-O3", "-fno-exceptions", "-Wall", "-Wextra", "-Wno-unused-parameter"],
    "cflags_cc!": ["-fno-rtti"],
    # Never unloaded: Node dlcloses an addon when the worker_thread that loaded it exits, and a
    # shared segment's SharedArrayBuffer outlives that thread with its unmap callback in here.
    "ldflags": ["-Wl,-z,nodelete"]
  },
  "targets": [
    {
      "target_name": "weft",
      "sources": [
        "native/addon.cc",
        "native/fail.cc",
        "native/shm.cc",
        "native/futex.cc",
        "native/membarrier.cc",
        "native/proc.cc",
        "native/reduce.cc",
        "native/reduce_isa.cc"
      ]
    }
  ],
  "conditions": [
    ["have_ofi==1", {
      "targets": [
        {
          "target_name": "weft_ofi",
          "sources": ["native/ofi_addon.cc", "native/fail.cc", "native/ofi.cc", "native/fd_relay.cc", "native/fabric_library.cc"],
          "cflags_cc": ["<!@(node scripts/gyp-fabric.mjs cflags)"],
          "libraries": ["-ldl"]
        }
      ]
    }]
  ]
}
