#include "runtime/checkpoint/torch_pickle.h"

#include <optional>

#include "runtime/checkpoint/mapped_file.h"

namespace libai::checkpoint {

using pickle::Unpickler;
using pickle::Value;
using Kind = Value::Kind;

namespace {

#define TORCH_FAIL(u, Type, ...) \
  LIBAI_THROW(Type, "pickle ", (u).name(), " at byte ", (u).position(), ": ", __VA_ARGS__)
#define TORCH_CHECK(u, cond, ...)               \
  do {                                          \
    if (!(cond)) [[unlikely]]                   \
      TORCH_FAIL(u, CorruptInput, __VA_ARGS__); \
  } while (0)

std::optional<DType> storage_dtype(const std::string& name) {
  if (name == "FloatStorage") return DType::f32;
  if (name == "DoubleStorage") return DType::f64;
  if (name == "HalfStorage") return DType::f16;
  if (name == "BFloat16Storage") return DType::bf16;
  if (name == "LongStorage") return DType::i64;
  if (name == "IntStorage") return DType::i32;
  if (name == "ByteStorage") return DType::u8;
  if (name == "BoolStorage") return DType::boolean;
  return std::nullopt;
}

// Everything a state dict needs and nothing else. Each entry is only a name here: what "calling"
// it means is the fixed C++ in call() below.
bool allowed(const std::string& qualified) {
  static const char* const kAllowed[] = {
      "collections.OrderedDict",
      "torch._utils._rebuild_tensor_v2",
      "torch._utils._rebuild_parameter",
      "torch._utils._rebuild_parameter_with_state",
      "torch._tensor._rebuild_from_type_v2",
      "torch.Tensor",
      "torch.nn.parameter.Parameter",
  };
  for (const char* name : kAllowed) {
    if (qualified == name) return true;
  }
  return false;
}

Value* find_class(Unpickler& u, const std::string& module, const std::string& name) {
  const std::string qualified = module + "." + name;
  const bool is_storage = module == "torch" && storage_dtype(name).has_value();
  if (!is_storage && !allowed(qualified)) {
    if (module == "torch" && name.size() > 7 && name.ends_with("Storage")) {
      TORCH_FAIL(u, Unsupported, "storage type '", qualified,
                 "' has a dtype this runtime does not support");
    }
    TORCH_FAIL(u, Unsupported, "global '", qualified,
               "' is not on the allow-list of a PyTorch state dict; refusing to load (nothing "
               "was executed)");
  }
  Value* v = u.make(Kind::global);
  v->text = qualified;
  return v;
}

int64_t int_arg(Unpickler& u, const Value& v, const char* what) {
  TORCH_CHECK(u, v.is(Kind::integer), what, " is a ", pickle::kind_name(v.kind), ", not an int");
  return v.integer;
}

Shape shape_arg(Unpickler& u, const Value& v, const char* what) {
  TORCH_CHECK(u, v.is(Kind::tuple) || v.is(Kind::list), what, " is a ", pickle::kind_name(v.kind),
              ", not a tuple");
  Shape out;
  for (const Value* item : v.items) {
    const int64_t n = int_arg(u, *item, what);
    TORCH_CHECK(u, n >= 0, what, " has a negative entry ", n);
    out.push_back(n);
  }
  return out;
}

Value* tensor_arg(Unpickler& u, Value& v, const char* what) {
  TORCH_CHECK(u, v.is(Kind::opaque) && v.text == kTorchTensorTag, what, " is a ",
              pickle::kind_name(v.kind), ", not a tensor");
  return &v;
}

// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks[, metadata])
Value* rebuild_tensor(Unpickler& u, const Value& args) {
  TORCH_CHECK(u, args.items.size() >= 4, "_rebuild_tensor_v2 takes at least 4 arguments, got ",
              args.items.size());
  const Value& storage_value = *args.items[0];
  TORCH_CHECK(u, storage_value.is(Kind::opaque) && storage_value.text == kTorchStorageTag,
              "_rebuild_tensor_v2: first argument is a ", pickle::kind_name(storage_value.kind),
              ", not a storage");
  const auto& storage = *static_cast<const TorchStorage*>(storage_value.payload.get());
  auto info = std::make_shared<TorchTensorInfo>();
  info->storage_key = storage.key;
  info->dtype = storage.dtype;
  info->storage_offset = int_arg(u, *args.items[1], "_rebuild_tensor_v2 storage_offset");
  info->shape = shape_arg(u, *args.items[2], "_rebuild_tensor_v2 size");
  info->strides = shape_arg(u, *args.items[3], "_rebuild_tensor_v2 stride");
  TORCH_CHECK(u, info->shape.size() == info->strides.size(), "_rebuild_tensor_v2: size ",
              shape_str(info->shape), " and stride ", shape_str(info->strides), " differ in rank");
  TORCH_CHECK(u, info->storage_offset >= 0, "negative storage offset ", info->storage_offset);
  // The last element addressed must lie inside the storage.
  uint64_t numel = 0, last = uint64_t(info->storage_offset);
  bool ok = checked_numel(info->shape, numel);
  for (size_t d = 0; ok && d < info->shape.size() && numel > 0; ++d) {
    uint64_t reach = 0;
    ok = checked_mul(uint64_t(info->shape[d] - 1), uint64_t(info->strides[d]), reach) &&
         !__builtin_add_overflow(last, reach, &last);
  }
  TORCH_CHECK(u, ok && (numel == 0 || last < uint64_t(storage.numel)), "tensor of size ",
              shape_str(info->shape), ", stride ", shape_str(info->strides), " and offset ",
              info->storage_offset, " reaches past storage '", storage.key, "' of ", storage.numel,
              " elements");
  Value* v = u.make(Kind::opaque);
  v->text = kTorchTensorTag;
  v->payload = std::move(info);
  return v;
}

Value* call(Unpickler& u, Value& callable, Value& args) {
  TORCH_CHECK(u, callable.is(Kind::global), "call of a ", pickle::kind_name(callable.kind),
              ", not of a global");
  const std::string& fn = callable.text;
  if (fn == "collections.OrderedDict") {
    Value* dict = u.make(Kind::dict);
    if (args.items.empty()) return dict;
    TORCH_CHECK(u, args.items.size() == 1 && args.items[0]->is(Kind::list),
                "OrderedDict takes one list of pairs");
    for (Value* pair : args.items[0]->items) {
      TORCH_CHECK(u, pair->is(Kind::tuple) && pair->items.size() == 2,
                  "OrderedDict item is not a pair");
      dict->items.push_back(pair->items[0]);
      dict->items.push_back(pair->items[1]);
    }
    return dict;
  }
  if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(u, args);
  if (fn == "torch._utils._rebuild_parameter" ||
      fn == "torch._utils._rebuild_parameter_with_state") {
    TORCH_CHECK(u, !args.items.empty(), fn, " without arguments");
    return tensor_arg(u, *args.items[0], "parameter data");
  }
  if (fn == "torch._tensor._rebuild_from_type_v2") {
    // (func, new_type, args, state): the subclass type is dropped; the tensor is what matters.
    TORCH_CHECK(u, args.items.size() >= 3 && args.items[2]->is(Kind::tuple),
                "_rebuild_from_type_v2 takes (func, type, args, state)");
    TORCH_CHECK(u, args.items[1]->is(Kind::global), "_rebuild_from_type_v2: type is a ",
                pickle::kind_name(args.items[1]->kind));
    Value* result = call(u, *args.items[0], *args.items[2]);
    return tensor_arg(u, *result, "_rebuild_from_type_v2 result");
  }
  TORCH_FAIL(u, CorruptInput, "global '", fn, "' cannot be called");
}

}  // namespace

pickle::Hooks torch_pickle_hooks(const ZipReader& zip, const std::string& data_folder) {
  pickle::Hooks hooks;
  hooks.find_class = find_class;
  hooks.call = call;
  hooks.build = [](Unpickler&, Value&, Value&) {
    // OrderedDict's __dict__ (state_dict._metadata) and tensor state: nothing a loader needs.
  };
  hooks.persistent_load = [&zip, data_folder](Unpickler& u, Value& pid) -> Value* {
    // ('storage', storage_type, key, location, numel)
    TORCH_CHECK(u,
                pid.is(Kind::tuple) && pid.items.size() == 5 && pid.items[0]->is(Kind::string) &&
                    pid.items[0]->text == "storage",
                "persistent id is not a ('storage', type, key, location, numel) tuple");
    const Value& type = *pid.items[1];
    const Value& key = *pid.items[2];
    TORCH_CHECK(u, type.is(Kind::global) && type.text.starts_with("torch."), "storage type is a ",
                pickle::kind_name(type.kind));
    auto dtype = storage_dtype(type.text.substr(6));
    TORCH_CHECK(u, dtype.has_value(), "'", type.text, "' is not a storage type");
    TORCH_CHECK(u, key.is(Kind::string), "storage key is a ", pickle::kind_name(key.kind));
    auto storage = std::make_shared<TorchStorage>();
    storage->key = key.text;
    storage->dtype = *dtype;
    storage->numel = int_arg(u, *pid.items[4], "storage numel");
    const ZipEntry* entry = zip.find(data_folder + key.text);
    TORCH_CHECK(u, entry != nullptr, "storage '", key.text, "' has no entry ", data_folder,
                key.text, " in the archive");
    const uint64_t bytes = zip.read(*entry).size();
    uint64_t expected = 0;
    TORCH_CHECK(u,
                storage->numel >= 0 &&
                    checked_mul(uint64_t(storage->numel), dtype_size(*dtype), expected) &&
                    expected == bytes,
                "storage '", key.text, "' of ", storage->numel, " ", dtype_name(*dtype),
                " elements does not match its entry of ", bytes, " bytes");
    Value* v = u.make(Kind::opaque);
    v->text = kTorchStorageTag;
    v->payload = std::move(storage);
    return v;
  };
  return hooks;
}

#undef TORCH_CHECK
#undef TORCH_FAIL

}  // namespace libai::checkpoint
