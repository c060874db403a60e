// A restricted unpickler: it builds plain values from a pickle stream and never executes
// anything. It implements the opcodes a PyTorch state dict uses (protocols 2-4); GLOBAL,
// REDUCE, NEWOBJ, BUILD and BINPERSID go through caller hooks, which decide what a global may
// be and what calling it produces (see torch_zip.cc for the allow-list).
//
//   Unpickler u(bytes, "archive/data.pkl", hooks);
//   const Value& root = u.load();      // valid while `u` lives
//   if (root.kind == Value::Kind::dict) ...
//
// Values live in the unpickler's arena and point at each other by raw pointer, so cycles
// (a list appended to itself) cost nothing and freeing is flat. An unknown opcode raises
// Unsupported; a malformed stream (stack underflow, truncated argument, a missing memo
// entry) raises CorruptInput; both name the stream and the byte offset.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace libai::checkpoint::pickle {

struct Value {
  enum class Kind : uint8_t {
    none,
    boolean,
    integer,
    floating,
    string,
    bytes,
    tuple,
    list,
    dict,
    global,
    opaque
  };
  Kind kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0;
  std::string text;                     // string, bytes, global ("module.name"), opaque tag
  std::vector<Value*> items;            // tuple, list; dict as key, value, key, value, ...
  std::shared_ptr<const void> payload;  // opaque values made by hooks

  bool is(Kind k) const { return kind == k; }
};

const char* kind_name(Value::Kind kind);

class Unpickler;

struct Hooks {
  // GLOBAL / STACK_GLOBAL: return a value standing for module.name, or throw.
  std::function<Value*(Unpickler&, const std::string& module, const std::string& name)> find_class;
  // REDUCE / NEWOBJ: `callable(*args)` where args is a tuple.
  std::function<Value*(Unpickler&, Value& callable, Value& args)> call;
  // BINPERSID.
  std::function<Value*(Unpickler&, Value& persistent_id)> persistent_load;
  // BUILD: obj.__setstate__(state); may do nothing.
  std::function<void(Unpickler&, Value& object, Value& state)> build;
};

class Unpickler {
 public:
  Unpickler(std::span<const uint8_t> bytes, std::string name, Hooks hooks);
  Value& load();

  Value* make(Value::Kind kind);
  const std::string& name() const { return name_; }
  size_t position() const { return opcode_at_; }  // offset of the opcode being run

 private:
  void step(uint8_t op);
  std::span<const uint8_t> take(size_t n);
  uint64_t take_le(int bytes);
  std::string take_line();
  Value* pop();
  Value& top();
  size_t pop_mark();
  Value* memo_get(uint64_t key);
  Value* make_string(Value::Kind kind, size_t length);
  void set_items(Value& dict, size_t from);
  Value* call(Value* callable, Value* args);

  std::span<const uint8_t> bytes_;
  std::string name_;
  Hooks hooks_;
  size_t pos_ = 0, opcode_at_ = 0;
  bool stopped_ = false;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
  std::vector<std::unique_ptr<Value>> arena_;
};

}  // namespace libai::checkpoint::pickle
