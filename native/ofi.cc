// libfabric binding: one RDM endpoint (fabric, domain, address vector, one completion queue)
// per Endpoint object, memory registration of JS memory, batched RMA posts and batched CQ reads.
//
// The hot paths talk to JS through caller-owned Uint32Arrays bound once:
//   commands (16 words per command, see kCmd*): submit(n) posts n of them in one call;
//   completions (8 words per entry, see kOut*): poll(max) fills up to max entries in one call.
// Both use raw napi_* calls: node-addon-api's wrappers cost more than the post itself.
// Compiled into weft_ofi.node only (binding.gyp builds it where libfabric's headers are found);
// libfabric itself is opened at load (fabric_library.h).
#include "addon.h"
#include "fabric_library.h"
#include "fd_relay.h"
#include "v8_bridge.h"

#include <poll.h>
#include <sys/random.h>
#include <time.h>
#include <uv.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace weft {

namespace {

// Command words (Uint32Array, kCmdWords per command).
constexpr int kCmdOp = 0;       // 1 WRITE, 2 WRITE with remote CQ data, 3 READ
constexpr int kCmdAddr = 1;     // fi_addr_t of the peer (AV table index)
constexpr int kCmdMr = 2;       // local MR handle
constexpr int kCmdOff = 3;      // offset in the local MR
constexpr int kCmdLen = 4;      // bytes
constexpr int kCmdRaddr = 5;    // remote address, lo/hi
constexpr int kCmdKey = 7;      // remote key, lo/hi
constexpr int kCmdData = 9;     // remote CQ data, lo/hi
constexpr int kCmdCtx = 11;     // context returned in the completion, lo/hi
constexpr int kCmdResult = 15;  // written by submit: 0, or -errno when the post failed
constexpr int kCmdWords = 16;

// Completion words (Uint32Array, kOutWords per entry).
constexpr int kOutKind = 0;  // 1 local op done, 2 remote write with data arrived, 3 error, 4 other
constexpr int kOutCtx = 1;   // lo/hi
constexpr int kOutLen = 3;
constexpr int kOutData = 4;  // lo/hi
constexpr int kOutSrc = 6;   // source fi_addr (with FI_SOURCE), else 0xffffffff
constexpr int kOutAux = 7;   // error entries: index into errorText(); others: low flag bits
constexpr int kOutWords = 8;

constexpr int kKindLocal = 1;
constexpr int kKindRemoteWrite = 2;
constexpr int kKindError = 3;
constexpr int kKindOther = 4;

struct Mr {
  fid_mr* mr = nullptr;
  char* base = nullptr;
  size_t len = 0;
  void* desc = nullptr;
  napi_ref ref = nullptr;  // keeps the JS object alive while registered
  // Keeps the memory alive while registered even when its buffer is detached (transferred to
  // a worker or cloned away) and that new owner is collected: the provider and peers go on
  // writing there until deregMr.
  std::shared_ptr<v8::BackingStore> store;
};

std::string Err(const char* what, int rc) {
  return std::string(what) + ": " + fab::strerror(rc < 0 ? -rc : rc) + " (" + std::to_string(rc) + ")";
}

// Resolves an ArrayBuffer or ArrayBufferView to its bytes (and, when asked, the buffer).
bool BytesOf(napi_env env, napi_value v, char** data, size_t* len, napi_value* buffer = nullptr) {
  bool is = false;
  napi_is_typedarray(env, v, &is);
  if (is) {
    napi_typedarray_type type;
    size_t length;
    napi_value ab;
    size_t off;
    void* p;
    napi_get_typedarray_info(env, v, &type, &length, &p, &ab, &off);
    static const size_t widths[] = {1, 1, 1, 2, 2, 4, 4, 4, 8, 8, 8};
    *data = static_cast<char*>(p);
    *len = length * (type <= napi_biguint64_array ? widths[type] : 1);
    if (buffer) *buffer = ab;
    return true;
  }
  napi_is_dataview(env, v, &is);
  if (is) {
    void* p;
    napi_value ab;
    size_t off;
    napi_get_dataview_info(env, v, len, &p, &ab, &off);
    *data = static_cast<char*>(p);
    if (buffer) *buffer = ab;
    return true;
  }
  napi_is_arraybuffer(env, v, &is);
  if (is) {
    void* p;
    napi_get_arraybuffer_info(env, v, &p, len);
    *data = static_cast<char*>(p);
    if (buffer) *buffer = v;
    return true;
  }
  return false;
}

// A Uint32Array bound for the lifetime of the endpoint (or until rebound).
struct Bound {
  uint32_t* words = nullptr;
  size_t count = 0;
  napi_ref ref = nullptr;
};

bool Bind(napi_env env, napi_value v, Bound* b) {
  napi_typedarray_type type;
  size_t length;
  void* p;
  bool is = false;
  napi_is_typedarray(env, v, &is);
  if (!is) return false;
  napi_get_typedarray_info(env, v, &type, &length, &p, nullptr, nullptr);
  if (type != napi_uint32_array) return false;
  if (b->ref) napi_delete_reference(env, b->ref);
  napi_create_reference(env, v, 1, &b->ref);
  b->words = static_cast<uint32_t*>(p);
  b->count = length;
  return true;
}

class Endpoint : public Napi::ObjectWrap<Endpoint> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "Endpoint",
                       {InstanceMethod("avInsert", &Endpoint::AvInsert),
                        InstanceMethod("avRemove", &Endpoint::AvRemove),
                        InstanceMethod("regMr", &Endpoint::RegMr),
                        InstanceMethod("deregMr", &Endpoint::DeregMr),
                        InstanceMethod("bindCommands", &Endpoint::BindCommands),
                        InstanceMethod("bindCompletions", &Endpoint::BindCompletions),
                        InstanceMethod("errorText", &Endpoint::ErrorText),
                        InstanceMethod("strerror", &Endpoint::StrError),
                        InstanceMethod("waitSync", &Endpoint::WaitSync),
                        InstanceMethod("waitAsync", &Endpoint::WaitAsync),
                        InstanceMethod("mayBlock", &Endpoint::MayBlockJs),
                        InstanceMethod("ringOnActivity", &Endpoint::RingOnActivity),
                        InstanceMethod("relayRings", &Endpoint::RelayRings),
                        InstanceMethod("close", &Endpoint::Close)});
  }

  // new Endpoint(provider, node | null, { source?: boolean, cqSize?: number })
  explicit Endpoint(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Endpoint>(info) {
    Napi::Env env = info.Env();
    env_ = env;
    if (info.Length() < 1 || !info[0].IsString()) {
      Fail(env, "EINVAL", "new Endpoint(provider: string, node?: string | null, options?)");
      return;
    }
    std::string prov = info[0].As<Napi::String>();
    std::string node;
    if (info.Length() > 1 && info[1].IsString()) node = info[1].As<Napi::String>();
    bool source = false;
    size_t cqSize = 16384;
    if (info.Length() > 2 && info[2].IsObject()) {
      Napi::Object o = info[2].As<Napi::Object>();
      if (o.Get("source").IsBoolean()) source = o.Get("source").As<Napi::Boolean>();
      if (o.Get("cqSize").IsNumber()) cqSize = o.Get("cqSize").As<Napi::Number>().Uint32Value();
    }
    std::string err = Open(prov, node, source, cqSize);
    if (!err.empty()) {
      Cleanup();
      Fail(env, "ETRANSPORT", "libfabric " + prov + (node.empty() ? "" : " on " + node) + ": " + err);
      return;
    }
    Napi::Object self = info.This().As<Napi::Object>();
    char name[256];
    size_t nameLen = sizeof(name);
    int rc = fi_getname(&ep_->fid, name, &nameLen);
    if (rc) {
      Cleanup();
      Fail(env, "ETRANSPORT", Err("fi_getname", rc));
      return;
    }
    self.Set("address", Napi::Buffer<char>::Copy(env, name, nameLen));
    Napi::Object attrs = Napi::Object::New(env);
    attrs.Set("provider", info_->fabric_attr->prov_name);
    attrs.Set("fabric", info_->fabric_attr->name ? info_->fabric_attr->name : "");
    attrs.Set("domain", info_->domain_attr->name ? info_->domain_attr->name : "");
    attrs.Set("mrMode", static_cast<double>(info_->domain_attr->mr_mode));
    attrs.Set("mrVirtAddr", (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) != 0);
    attrs.Set("mrProvKey", (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) != 0);
    attrs.Set("mrLocal", (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0);
    attrs.Set("mrEndpoint", (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) != 0);
    attrs.Set("mrKeySize", static_cast<double>(info_->domain_attr->mr_key_size));
    attrs.Set("cqDataSize", static_cast<double>(info_->domain_attr->cq_data_size));
    attrs.Set("msgOrder", static_cast<double>(info_->tx_attr->msg_order));
    attrs.Set("txSize", static_cast<double>(info_->tx_attr->size));
    attrs.Set("injectSize", static_cast<double>(info_->tx_attr->inject_size));
    attrs.Set("maxMsgSize", static_cast<double>(info_->ep_attr->max_msg_size));
    attrs.Set("source", source_);
    attrs.Set("waitFd", waitFd_ >= 0);
    attrs.Set("waitObject", waitFd_ >= 0 ? "fd" : "none");
    self.Set("attrs", attrs);
  }

  ~Endpoint() override {
    CloseHandles();
    Cleanup();
  }

  // The hot paths, installed on the prototype as raw Node-API functions (see InitOfi).
  static napi_value Submit(napi_env env, napi_callback_info cb);
  static napi_value Poll(napi_env env, napi_callback_info cb);

 private:
  std::string Open(const std::string& prov, const std::string& node, bool source, size_t cqSize) {
    fi_info* hints = fab::allocinfo();
    if (!hints) return "fi_allocinfo failed";
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | (source ? FI_SOURCE : 0);
    // Integer contexts: no FI_CONTEXT mode. The mr_mode bits we can honor; the provider clears
    // the ones it does not need (tcp;ofi_rxm and shm clear all: offsets and our own keys).
    hints->mode = 0;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->av_type = FI_AV_TABLE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    // Ask for no ordering so every provider matches; the returned msg_order says what the
    // provider keeps anyway, and the endpoint opened from that info gets exactly that.
    hints->fabric_attr->prov_name = strdup(prov.c_str());
    const char* n = node.empty() ? nullptr : node.c_str();
    // Ask for every RMA ordering, then drop what the provider refuses one bit at a time (tcp
    // refuses write-after-read); the JS side fences the pairs left out. Asking matters: shm
    // reports no RMA ordering at all unless asked.
    uint64_t order = FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW | FI_ORDER_SAR | FI_ORDER_SAW;
    const uint64_t drop[] = {FI_ORDER_WAR, FI_ORDER_RAR, FI_ORDER_SAR, FI_ORDER_SAW, FI_ORDER_RAW, FI_ORDER_WAW};
    int rc = -FI_ENODATA;
    for (size_t k = 0; k <= sizeof(drop) / sizeof(drop[0]); k++) {
      hints->tx_attr->msg_order = order;
      rc = fab::getinfo(FI_VERSION(1, 17), n, nullptr, n ? FI_SOURCE : 0, hints, &info_);
      if (rc != -FI_ENODATA || k == sizeof(drop) / sizeof(drop[0])) break;
      order &= ~drop[k];
    }
    fab::freeinfo(hints);
    if (rc) return Err("fi_getinfo found no RDM endpoint with RMA", rc);
    source_ = source;
    if ((rc = fab::fabric(info_->fabric_attr, &fabric_, nullptr))) return Err("fi_fabric", rc);
    if ((rc = fi_domain(fabric_, info_, &domain_, nullptr))) return Err("fi_domain", rc);
    fi_cq_attr cqa = {};
    cqa.size = cqSize;
    cqa.format = FI_CQ_FORMAT_DATA;
    cqa.wait_obj = FI_WAIT_FD;
    rc = fi_cq_open(domain_, &cqa, &cq_, nullptr);
    if (rc == 0) {
      if (fi_control(&cq_->fid, FI_GETWAIT, &waitFd_) != 0) waitFd_ = -1;
    } else {
      // shm has no fd. Its FI_WAIT_UNSPEC object (fi_cq_sread) spins in sched_yield and
      // crashed under Node here, so fd-less CQs are plain and waits sleep in short slices.
      cqa.wait_obj = FI_WAIT_NONE;
      rc = fi_cq_open(domain_, &cqa, &cq_, nullptr);
      if (rc) return Err("fi_cq_open", rc);
    }
    fi_av_attr ava = {};
    ava.type = FI_AV_TABLE;
    ava.count = 256;
    if ((rc = fi_av_open(domain_, &ava, &av_, nullptr))) return Err("fi_av_open", rc);
    if ((rc = fi_endpoint(domain_, info_, &ep_, nullptr))) return Err("fi_endpoint", rc);
    if ((rc = fi_ep_bind(ep_, &av_->fid, 0))) return Err("fi_ep_bind(av)", rc);
    if ((rc = fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV))) return Err("fi_ep_bind(cq)", rc);
    if ((rc = fi_enable(ep_))) return Err("fi_enable", rc);
    return "";
  }

  void Cleanup() {
    relay_.Stop();  // its thread polls the CQ's fd and rings a segment's word: both go below
    StopWait(false);
    napi_env env = env_;
    // The registered memory is given back after the endpoint, CQ and domain are closed (at the
    // end of this function): an operation still in the provider may write into it until then,
    // and a buffer that was transferred away may have no other owner left.
    std::vector<std::shared_ptr<v8::BackingStore>> stores = std::move(retired_);
    retired_.clear();
    for (std::vector<Mr>* list : {&mrs_, &pinned_}) {
      for (Mr& m : *list) {
        if (m.mr) fi_close(&m.mr->fid);
        if (m.ref && env) napi_delete_reference(env, m.ref);
        if (m.store) stores.push_back(std::move(m.store));
        m = Mr();
      }
      list->clear();
    }
    freeMrs_.clear();
    if (ep_) fi_close(&ep_->fid);
    if (av_) fi_close(&av_->fid);
    if (cq_) fi_close(&cq_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fab::freeinfo(info_);
    ep_ = nullptr;
    av_ = nullptr;
    cq_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
    waitFd_ = -1;
    if (env) {
      if (cmd_.ref) napi_delete_reference(env, cmd_.ref);
      if (out_.ref) napi_delete_reference(env, out_.ref);
    }
    cmd_ = Bound();
    out_ = Bound();
  }

  bool IsOpen(Napi::Env env) {
    if (ep_) return true;
    Fail(env, "ECLOSED", "libfabric endpoint is closed");
    return false;
  }

  // avInsert(address: Uint8Array): number (fi_addr)
  Napi::Value AvInsert(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    char* data;
    size_t len;
    if (info.Length() < 1 || !BytesOf(env, info[0], &data, &len) || len == 0) return Fail(env, "EINVAL", "avInsert(address: Uint8Array)");
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    int rc = fi_av_insert(av_, data, 1, &addr, 0, nullptr);
    if (rc != 1) return Fail(env, "ETRANSPORT", Err("fi_av_insert", rc < 0 ? rc : -FI_EINVAL));
    return Napi::Number::New(env, static_cast<double>(addr));
  }

  Napi::Value AvRemove(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    fi_addr_t addr = static_cast<fi_addr_t>(info[0].As<Napi::Number>().Int64Value());
    int rc = fi_av_remove(av_, &addr, 1, 0);
    if (rc) return Fail(env, "ETRANSPORT", Err("fi_av_remove", rc));
    return env.Undefined();
  }

  // regMr(view, requestedKey: bigint): { handle, key: bigint, base: bigint }
  Napi::Value RegMr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    char* data;
    size_t len;
    napi_value buffer = nullptr;
    if (info.Length() < 1 || !BytesOf(env, info[0], &data, &len, &buffer) || len == 0) {
      return Fail(env, "EINVAL", "regMr(view: ArrayBuffer | ArrayBufferView of at least 1 byte, requestedKey?: bigint)");
    }
    uint64_t requested = 0;
    if (info.Length() > 1 && info[1].IsBigInt()) {
      bool lossless;
      requested = info[1].As<Napi::BigInt>().Uint64Value(&lossless);
    } else {
      if (getrandom(&requested, sizeof(requested), 0) != sizeof(requested)) requested = reinterpret_cast<uintptr_t>(data);
    }
    size_t ks = info_->domain_attr->mr_key_size;
    if (ks < 8) requested &= (uint64_t(1) << (8 * ks)) - 1;
    uint64_t access = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    Mr m;
    int rc = fi_mr_reg(domain_, data, len, access, 0, requested, 0, &m.mr, nullptr);
    if (rc) return Fail(env, "ETRANSPORT", Err("fi_mr_reg", rc));
    if (info_->domain_attr->mr_mode & FI_MR_ENDPOINT) {
      if ((rc = fi_mr_bind(m.mr, &ep_->fid, 0)) || (rc = fi_mr_enable(m.mr))) {
        fi_close(&m.mr->fid);
        return Fail(env, "ETRANSPORT", Err("fi_mr_bind/enable", rc));
      }
    }
    m.base = data;
    m.len = len;
    m.desc = fi_mr_desc(m.mr);
    m.store = BackingStoreOf(buffer);
    napi_create_reference(env, info[0], 1, &m.ref);
    uint32_t handle;
    if (!freeMrs_.empty()) {
      handle = freeMrs_.back();
      freeMrs_.pop_back();
      mrs_[handle] = m;
    } else {
      handle = static_cast<uint32_t>(mrs_.size());
      mrs_.push_back(m);
    }
    uint64_t base = (info_->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? reinterpret_cast<uintptr_t>(data) : 0;
    Napi::Object out = Napi::Object::New(env);
    out.Set("handle", Napi::Number::New(env, handle));
    out.Set("key", Napi::BigInt::New(env, static_cast<uint64_t>(fi_mr_key(m.mr))));
    out.Set("base", Napi::BigInt::New(env, base));
    return out;
  }

  Napi::Value DeregMr(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    uint32_t h = info[0].As<Napi::Number>().Uint32Value();
    if (h >= mrs_.size() || !mrs_[h].mr) return Fail(env, "EINVAL", "deregMr: unknown handle");
    // deregMr(handle, keepMemory): keepMemory when an operation on the region was abandoned
    // (its QP failed or closed) while the provider may still read or write the bytes.
    bool keep = info.Length() > 1 && info[1].IsBoolean() && info[1].As<Napi::Boolean>().Value();
    if (keep) {
      // The provider may still read the registration (its descriptor) and the bytes: both
      // stay, with the JS object, until the endpoint closes; the handle number is free again.
      pinned_.push_back(std::move(mrs_[h]));
      mrs_[h] = Mr();
      freeMrs_.push_back(h);
      return env.Undefined();
    }
    int rc = fi_close(&mrs_[h].mr->fid);
    napi_delete_reference(env, mrs_[h].ref);
    // A registration the provider would not close may still be written into: its memory stays
    // until the endpoint closes.
    if (rc && mrs_[h].store) retired_.push_back(std::move(mrs_[h].store));
    mrs_[h] = Mr();
    freeMrs_.push_back(h);
    if (rc) return Fail(env, "ETRANSPORT", Err("fi_close(mr)", rc));
    return env.Undefined();
  }

  Napi::Value BindCommands(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !Bind(env, info[0], &cmd_)) return Fail(env, "EINVAL", "bindCommands(Uint32Array)");
    return env.Undefined();
  }

  Napi::Value BindCompletions(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !Bind(env, info[0], &out_)) return Fail(env, "EINVAL", "bindCompletions(Uint32Array)");
    return env.Undefined();
  }

  // submit(n): posts commands [0, n) of the bound command array in order; returns how many the
  // provider accepted. Stops at -FI_EAGAIN (queue full: progress, then retry the rest) and at a
  // failed post, whose -errno is left in that command's result word.
  static Endpoint* FromThis(napi_env env, napi_value self) {
    void* p = nullptr;
    if (napi_unwrap(env, self, &p) != napi_ok || p == nullptr) return nullptr;
    return static_cast<Endpoint*>(static_cast<Napi::ObjectWrap<Endpoint>*>(p));
  }

  static napi_value SubmitImpl(napi_env env, napi_callback_info cb) {
    size_t argc = 1;
    napi_value argv[1];
    napi_value self;
    void* data = nullptr;
    napi_get_cb_info(env, cb, &argc, argv, &self, &data);
    Endpoint* e = FromThis(env, self);
    uint32_t n = 0;
    napi_get_value_uint32(env, argv[0], &n);
    napi_value result;
    if (!e || !e->ep_ || n * size_t(kCmdWords) > e->cmd_.count) {
      napi_throw_error(env, "EINVAL", "submit: endpoint closed, no command array bound, or n beyond it");
      return nullptr;
    }
    uint32_t i = 0;
    for (; i < n; i++) {
      uint32_t* c = e->cmd_.words + size_t(i) * kCmdWords;
      int rc = e->PostOne(c);
      if (rc == -FI_EAGAIN) break;
      c[kCmdResult] = static_cast<uint32_t>(rc);
      if (rc) break;
    }
    napi_create_uint32(env, i, &result);
    return result;
  }

  int PostOne(const uint32_t* c) {
    uint32_t h = c[kCmdMr];
    size_t off = c[kCmdOff];
    size_t len = c[kCmdLen];
    if (h >= mrs_.size() || !mrs_[h].mr || off + len > mrs_[h].len) return -FI_EINVAL;
    const Mr& m = mrs_[h];
    void* buf = m.base + off;
    fi_addr_t dest = c[kCmdAddr];
    uint64_t raddr = uint64_t(c[kCmdRaddr]) | (uint64_t(c[kCmdRaddr + 1]) << 32);
    uint64_t key = uint64_t(c[kCmdKey]) | (uint64_t(c[kCmdKey + 1]) << 32);
    void* ctx = reinterpret_cast<void*>(static_cast<uintptr_t>(uint64_t(c[kCmdCtx]) | (uint64_t(c[kCmdCtx + 1]) << 32)));
    switch (c[kCmdOp]) {
      case 1:
        return static_cast<int>(fi_write(ep_, buf, len, m.desc, dest, raddr, key, ctx));
      case 2: {
        uint64_t d = uint64_t(c[kCmdData]) | (uint64_t(c[kCmdData + 1]) << 32);
        return static_cast<int>(fi_writedata(ep_, buf, len, m.desc, d, dest, raddr, key, ctx));
      }
      case 3:
        return static_cast<int>(fi_read(ep_, buf, len, m.desc, dest, raddr, key, ctx));
      default:
        return -FI_EINVAL;
    }
  }

  // poll(max): reads up to max completions into the bound completion array; returns the count.
  static napi_value PollImpl(napi_env env, napi_callback_info cb) {
    size_t argc = 1;
    napi_value argv[1];
    napi_value self;
    napi_get_cb_info(env, cb, &argc, argv, &self, nullptr);
    Endpoint* e = FromThis(env, self);
    uint32_t max = 0;
    napi_get_value_uint32(env, argv[0], &max);
    if (!e || !e->cq_ || !e->out_.words) {
      napi_throw_error(env, "EINVAL", "poll: endpoint closed or no completion array bound");
      return nullptr;
    }
    if (max > e->out_.count / kOutWords) max = static_cast<uint32_t>(e->out_.count / kOutWords);
    napi_value result;
    napi_create_uint32(env, e->PollInto(max), &result);
    return result;
  }

  uint32_t PollInto(uint32_t max) {
    errors_.clear();
    uint32_t n = 0;
    uint32_t* out = out_.words;
    constexpr size_t kChunk = 64;
    fi_cq_data_entry ent[kChunk];
    fi_addr_t src[kChunk];
    while (n < max) {
      size_t want = max - n < kChunk ? max - n : kChunk;
      ssize_t got = source_ ? fi_cq_readfrom(cq_, ent, want, src) : fi_cq_read(cq_, ent, want);
      if (got == -FI_EAVAIL) {
        EmitError(out + size_t(n) * kOutWords);
        n++;
        continue;
      }
      if (got <= 0) break;
      for (ssize_t i = 0; i < got; i++, n++) Emit(out + size_t(n) * kOutWords, ent[i], source_ ? src[i] : FI_ADDR_NOTAVAIL);
      if (static_cast<size_t>(got) < want) break;
    }
    return n;
  }

  static void Emit(uint32_t* o, const fi_cq_data_entry& e, fi_addr_t src) {
    uint64_t ctx = reinterpret_cast<uintptr_t>(e.op_context);
    o[kOutKind] = (e.flags & FI_REMOTE_WRITE) ? kKindRemoteWrite : ((e.flags & FI_RMA) ? kKindLocal : kKindOther);
    o[kOutCtx] = static_cast<uint32_t>(ctx);
    o[kOutCtx + 1] = static_cast<uint32_t>(ctx >> 32);
    o[kOutLen] = static_cast<uint32_t>(e.len);
    o[kOutData] = static_cast<uint32_t>(e.data);
    o[kOutData + 1] = static_cast<uint32_t>(e.data >> 32);
    o[kOutSrc] = src == FI_ADDR_NOTAVAIL ? 0xffffffffu : static_cast<uint32_t>(src);
    o[kOutAux] = static_cast<uint32_t>(e.flags);
  }

  void EmitError(uint32_t* o) {
    fi_cq_err_entry err = {};
    char provText[256];
    ssize_t rc = fi_cq_readerr(cq_, &err, 0);
    uint64_t ctx = rc >= 0 ? reinterpret_cast<uintptr_t>(err.op_context) : 0;
    std::string text = rc >= 0 ? std::string(fab::strerror(err.err)) : Err("fi_cq_readerr", static_cast<int>(rc));
    if (rc >= 0 && err.prov_errno) {
      const char* p = fi_cq_strerror(cq_, err.prov_errno, err.err_data, provText, sizeof(provText));
      text += std::string(" (provider: ") + (p ? p : "?") + ", prov_errno " + std::to_string(err.prov_errno) + ")";
    }
    o[kOutKind] = kKindError;
    o[kOutCtx] = static_cast<uint32_t>(ctx);
    o[kOutCtx + 1] = static_cast<uint32_t>(ctx >> 32);
    o[kOutLen] = static_cast<uint32_t>(err.len);
    o[kOutData] = static_cast<uint32_t>(err.err);
    o[kOutData + 1] = static_cast<uint32_t>(err.flags);
    o[kOutSrc] = 0xffffffffu;
    o[kOutAux] = static_cast<uint32_t>(errors_.size());
    errors_.push_back(text);
  }

  // errorText(i): text of error entry i of the last poll.
  Napi::Value ErrorText(const Napi::CallbackInfo& info) {
    uint32_t i = info[0].As<Napi::Number>().Uint32Value();
    return Napi::String::New(info.Env(), i < errors_.size() ? errors_[i] : std::string("unknown fabric error"));
  }

  Napi::Value StrError(const Napi::CallbackInfo& info) {
    int code = info[0].As<Napi::Number>().Int32Value();
    return Napi::String::New(info.Env(), fab::strerror(code < 0 ? -code : code));
  }

  // The CQ's wait fd is an epoll set holding a signal socket that libfabric sets on every
  // completion and resets only in fi_trywait: without it the fd stays readable after the first
  // completion and every "sleep" returns at once (a waiting rank burned its core, and with more
  // ranks than cores the others waited for the scheduler tick). fi_trywait also says whether
  // the provider has work to progress first (-FI_EAGAIN: poll the CQ again, do not block).
  bool MayBlock() {
    fid* f = &cq_->fid;
    return fi_trywait(fabric_, &f, 1) == FI_SUCCESS;
  }

  // mayBlock(): false while the CQ has entries or the provider has work to progress (a sleep
  // on the fd would not end). For doorbells that combine this one with others (shm + ofi).
  Napi::Value MayBlockJs(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    return Napi::Boolean::New(env, waitFd_ < 0 || MayBlock());
  }

  // waitSync(timeoutMs): blocks until the CQ may have entries (true) or the timeout (false).
  Napi::Value WaitSync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    double ms = info[0].As<Napi::Number>().DoubleValue();
    int timeout = ms < 0 ? 0 : (ms > 1e9 ? 1000000000 : static_cast<int>(ms));
    if (waitFd_ >= 0) {
      if (!MayBlock()) return Napi::Boolean::New(env, true);
      pollfd p = {waitFd_, POLLIN, 0};
      return Napi::Boolean::New(env, ::poll(&p, 1, timeout) > 0);
    }
    // No fd: sleep one short slice; the caller polls again.
    struct timespec ts = {0, timeout >= 1 ? 1000000 : 200000};
    nanosleep(&ts, nullptr);
    return Napi::Boolean::New(env, true);
  }

  // ringOnActivity(i32, index): until the CQ's wait fd next becomes readable, then add 1 to
  // i32[index] (a futex word in shared memory) and wake its waiters (FdRelay). For a device
  // that sleeps on another provider's futex and must also wake for fabric completions. Call
  // after mayBlock() said true, so the fd is not readable from a completion already seen.
  // False without a wait fd or helper thread: the caller then sleeps in short slices.
  Napi::Value RingOnActivity(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    if (waitFd_ < 0) return Napi::Boolean::New(env, false);
    if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
      return Fail(env, "EINVAL", "ringOnActivity(i32: Int32Array, index: number)");
    }
    Napi::Int32Array words = info[0].As<Napi::Int32Array>();
    int64_t i = info[1].As<Napi::Number>().Int64Value();
    if (i < 0 || static_cast<size_t>(i) >= words.ElementLength()) return Fail(env, "ERANGE", "ringOnActivity: index out of range");
    return Napi::Boolean::New(env, relay_.Arm(waitFd_, words.Data() + i));
  }

  Napi::Value RelayRings(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(relay_.rings()));
  }

  // waitAsync(timeoutMs): Promise<boolean>, on the libuv loop (fd providers only). One wait at
  // a time: the JS side shares the promise among its callers.
  Napi::Value WaitAsync(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!IsOpen(env)) return env.Undefined();
    if (waitFd_ < 0) return Fail(env, "ENOTSUP", "waitAsync: this provider has no CQ wait fd");
    if (deferred_) return Fail(env, "EBUSY", "waitAsync: a wait is already pending");
    double ms = info[0].As<Napi::Number>().DoubleValue();
    napi_value promise;
    napi_create_promise(env, &deferred_, &promise);
    Ref();  // a pending wait keeps this object (and its uv handles) alive
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    if (!poll_) {
      poll_ = new uv_poll_t;
      uv_poll_init(loop, poll_, waitFd_);
      poll_->data = this;
      timer_ = new uv_timer_t;
      uv_timer_init(loop, timer_);
      timer_->data = this;
      idle_ = new uv_idle_t;
      uv_idle_init(loop, idle_);
      idle_->data = this;
    }
    if (!MayBlock()) {
      // Work is ready now: settle on the next loop iteration, as setImmediate would (an idle
      // handle also keeps that iteration's poll phase from blocking). Not from a 0 ms timer:
      // the continuation runs inside its callback scope, a waiter that finds work again
      // starts another one, and libuv runs it in the same timers phase: the event loop never
      // reaches I/O, the threadpool or other timers (a rank in init starved its store client
      // this way). An idle handle started from an idle callback runs only next iteration.
      uv_idle_start(idle_, [](uv_idle_t* h) { static_cast<Endpoint*>(h->data)->StopWait(true); });
      return Napi::Value(env, promise);
    }
    uv_poll_start(poll_, UV_READABLE, [](uv_poll_t* h, int, int) { static_cast<Endpoint*>(h->data)->StopWait(true); });
    uint64_t t = ms < 0 ? 0 : static_cast<uint64_t>(ms);
    uv_timer_start(timer_, [](uv_timer_t* h) { static_cast<Endpoint*>(h->data)->StopWait(false); }, t, 0);
    return Napi::Value(env, promise);
  }

  void StopWait(bool ready) {
    if (poll_) uv_poll_stop(poll_);
    if (timer_) uv_timer_stop(timer_);
    if (idle_) uv_idle_stop(idle_);
    if (deferred_) {
      // A uv callback is not a JS call: without a callback scope the promise's continuations
      // (microtasks) would wait for some unrelated callback to run them.
      napi_handle_scope scope;
      napi_open_handle_scope(env_, &scope);
      napi_value resource, name;
      napi_create_object(env_, &resource);
      napi_create_string_utf8(env_, "weft:ofi-wait", NAPI_AUTO_LENGTH, &name);
      napi_async_context actx;
      napi_async_init(env_, resource, name, &actx);
      napi_callback_scope cscope;
      napi_open_callback_scope(env_, resource, actx, &cscope);
      Settle(ready);
      napi_close_callback_scope(env_, cscope);
      napi_async_destroy(env_, actx);
      napi_close_handle_scope(env_, scope);
      Unref();
    }
  }

  void CloseHandles() {
    if (!poll_) return;
    uv_poll_stop(poll_);
    uv_timer_stop(timer_);
    uv_idle_stop(idle_);
    uv_close(reinterpret_cast<uv_handle_t*>(poll_), [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
    uv_close(reinterpret_cast<uv_handle_t*>(timer_), [](uv_handle_t* h) { delete reinterpret_cast<uv_timer_t*>(h); });
    uv_close(reinterpret_cast<uv_handle_t*>(idle_), [](uv_handle_t* h) { delete reinterpret_cast<uv_idle_t*>(h); });
    poll_ = nullptr;
    timer_ = nullptr;
    idle_ = nullptr;
  }

  void Settle(bool ready) {
    napi_deferred d = deferred_;
    deferred_ = nullptr;
    napi_value v;
    napi_get_boolean(env_, ready, &v);
    napi_resolve_deferred(env_, d, v);
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    StopWait(false);
    CloseHandles();
    Cleanup();
    return info.Env().Undefined();
  }

  napi_env env_ = nullptr;
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_av* av_ = nullptr;
  fid_ep* ep_ = nullptr;
  int waitFd_ = -1;
  bool source_ = false;
  std::vector<Mr> mrs_;
  // Memory of registrations whose fi_close failed: released in Cleanup, after the endpoint.
  std::vector<std::shared_ptr<v8::BackingStore>> retired_;
  // Registrations deregistered while an abandoned operation may still use them (deregMr's
  // keepMemory): open, with their memory, until Cleanup.
  std::vector<Mr> pinned_;
  std::vector<uint32_t> freeMrs_;
  Bound cmd_;
  Bound out_;
  std::vector<std::string> errors_;
  uv_poll_t* poll_ = nullptr;
  uv_timer_t* timer_ = nullptr;
  uv_idle_t* idle_ = nullptr;
  napi_deferred deferred_ = nullptr;
  FdRelay relay_;
};

napi_value Endpoint::Submit(napi_env env, napi_callback_info cb) { return SubmitImpl(env, cb); }
napi_value Endpoint::Poll(napi_env env, napi_callback_info cb) { return PollImpl(env, cb); }

// providers(): names of the providers offering RDM endpoints with RMA here.
Napi::Value Providers(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  fi_info* hints = fab::allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  fi_info* list = nullptr;
  int rc = fab::getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list);
  fab::freeinfo(hints);
  Napi::Array out = Napi::Array::New(env);
  if (rc) return out;
  std::set<std::string> seen;
  uint32_t k = 0;
  for (fi_info* i = list; i; i = i->next) {
    std::string name = i->fabric_attr->prov_name;
    if (seen.insert(name).second) out.Set(k++, name);
  }
  fab::freeinfo(list);
  return out;
}

}  // namespace

void InitOfi(Napi::Env env, Napi::Object exports) {
  Napi::Object ofi = Napi::Object::New(env);
  const std::string& missing = fab::Open();
  if (!missing.empty()) {
    ofi.Set("available", Napi::Boolean::New(env, false));
    ofi.Set("reason", missing);
    exports.Set("ofi", ofi);
    return;
  }
  ofi.Set("available", Napi::Boolean::New(env, true));
  uint32_t v = fab::version();
  ofi.Set("version", std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v)) + ".0");
  ofi.Set("providers", Napi::Function::New(env, Providers, "providers"));
  Napi::Function ctor = Endpoint::Define(env);
  Napi::Object proto = ctor.Get("prototype").As<Napi::Object>();
  napi_value fn;
  napi_create_function(env, "submit", NAPI_AUTO_LENGTH, Endpoint::Submit, nullptr, &fn);
  proto.Set("submit", Napi::Value(env, fn));
  napi_create_function(env, "poll", NAPI_AUTO_LENGTH, Endpoint::Poll, nullptr, &fn);
  proto.Set("poll", Napi::Value(env, fn));
  ofi.Set("Endpoint", ctor);
  exports.Set("ofi", ofi);
}


}  // namespace weft
