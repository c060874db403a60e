#include "runtime/checkpoint/pickle.h"

#include <cstring>

#include "runtime/error.h"

namespace libai::checkpoint::pickle {

using Kind = Value::Kind;

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::none: return "None";
    case Kind::boolean: return "bool";
    case Kind::integer: return "int";
    case Kind::floating: return "float";
    case Kind::string: return "str";
    case Kind::bytes: return "bytes";
    case Kind::tuple: return "tuple";
    case Kind::list: return "list";
    case Kind::dict: return "dict";
    case Kind::global: return "global";
    case Kind::opaque: return "object";
  }
  return "?";
}

#define PICKLE_FAIL(Type, ...) \
  LIBAI_THROW(Type, "pickle ", name_, " at byte ", opcode_at_, ": ", __VA_ARGS__)
#define PICKLE_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) [[unlikely]]                 \
      PICKLE_FAIL(CorruptInput, __VA_ARGS__); \
  } while (0)

Unpickler::Unpickler(std::span<const uint8_t> bytes, std::string name, Hooks hooks)
    : bytes_(bytes), name_(std::move(name)), hooks_(std::move(hooks)) {}

Value* Unpickler::make(Kind kind) {
  arena_.push_back(std::make_unique<Value>());
  arena_.back()->kind = kind;
  return arena_.back().get();
}

std::span<const uint8_t> Unpickler::take(size_t n) {
  PICKLE_CHECK(n <= bytes_.size() - pos_, "argument of ", n, " bytes runs past the end (",
               bytes_.size() - pos_, " left)");
  auto out = bytes_.subspan(pos_, n);
  pos_ += n;
  return out;
}

uint64_t Unpickler::take_le(int bytes) {
  auto p = take(size_t(bytes));
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string Unpickler::take_line() {
  const size_t start = pos_;
  while (pos_ < bytes_.size() && bytes_[pos_] != '\n') ++pos_;
  PICKLE_CHECK(pos_ < bytes_.size(), "unterminated GLOBAL name");
  std::string line(reinterpret_cast<const char*>(bytes_.data() + start), pos_ - start);
  ++pos_;
  return line;
}

Value* Unpickler::pop() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  PICKLE_CHECK(stack_.size() > floor, "stack underflow");
  Value* v = stack_.back();
  stack_.pop_back();
  return v;
}

Value& Unpickler::top() {
  const size_t floor = marks_.empty() ? 0 : marks_.back();
  PICKLE_CHECK(stack_.size() > floor, "stack underflow");
  return *stack_.back();
}

size_t Unpickler::pop_mark() {
  PICKLE_CHECK(!marks_.empty(), "no MARK on the stack");
  const size_t mark = marks_.back();
  marks_.pop_back();
  return mark;
}

Value* Unpickler::memo_get(uint64_t key) {
  auto it = memo_.find(key);
  PICKLE_CHECK(it != memo_.end(), "memo key ", key, " was never stored");
  return it->second;
}

Value* Unpickler::make_string(Kind kind, size_t length) {
  auto raw = take(length);
  Value* v = make(kind);
  v->text.assign(reinterpret_cast<const char*>(raw.data()), raw.size());
  return v;
}

namespace {

bool same_key(const Value& a, const Value& b) {
  if (&a == &b) return true;
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::string:
    case Kind::bytes: return a.text == b.text;
    case Kind::integer: return a.integer == b.integer;
    case Kind::boolean: return a.boolean == b.boolean;
    case Kind::none: return true;
    default: return false;
  }
}

}  // namespace

// Pairs stack_[from:] into `dict`, replacing existing keys as Python does.
void Unpickler::set_items(Value& dict, size_t from) {
  PICKLE_CHECK(dict.is(Kind::dict), "SETITEM(S) on a ", kind_name(dict.kind), ", not a dict");
  PICKLE_CHECK((stack_.size() - from) % 2 == 0, "SETITEMS with an odd number of items");
  for (size_t i = from; i < stack_.size(); i += 2) {
    bool replaced = false;
    for (size_t k = 0; k < dict.items.size(); k += 2) {
      if (same_key(*dict.items[k], *stack_[i])) {
        dict.items[k + 1] = stack_[i + 1];
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      dict.items.push_back(stack_[i]);
      dict.items.push_back(stack_[i + 1]);
    }
  }
  stack_.resize(from);
}

Value* Unpickler::call(Value* callable, Value* args) {
  PICKLE_CHECK(args->is(Kind::tuple), "call arguments are a ", kind_name(args->kind),
               ", not a tuple");
  if (!hooks_.call) PICKLE_FAIL(Unsupported, "calls are not allowed in this pickle");
  return hooks_.call(*this, *callable, *args);
}

Value& Unpickler::load() {
  while (!stopped_) {
    PICKLE_CHECK(pos_ < bytes_.size(), "stream ends without STOP");
    opcode_at_ = pos_;
    step(bytes_[pos_++]);
  }
  PICKLE_CHECK(stack_.size() == 1 && marks_.empty(), "STOP leaves ", stack_.size(), " values and ",
               marks_.size(), " marks on the stack");
  return *stack_.back();
}

void Unpickler::step(uint8_t op) {
  switch (op) {
    case 0x80: {  // PROTO
      const uint64_t protocol = take_le(1);
      if (protocol > 5) PICKLE_FAIL(Unsupported, "pickle protocol ", protocol);
      return;
    }
    case 0x95: take(8); return;  // FRAME: a size hint for buffered readers; we have it all
    case '.': stopped_ = true; return;
    case '}': stack_.push_back(make(Kind::dict)); return;
    case ']': stack_.push_back(make(Kind::list)); return;
    case ')': stack_.push_back(make(Kind::tuple)); return;
    case '(': marks_.push_back(stack_.size()); return;
    case '0': pop(); return;
    case '1': stack_.resize(pop_mark()); return;
    case '2': stack_.push_back(&top()); return;
    case 'X': stack_.push_back(make_string(Kind::string, size_t(take_le(4)))); return;
    case 0x8c: stack_.push_back(make_string(Kind::string, size_t(take_le(1)))); return;
    case 0x8d: {
      const uint64_t n = take_le(8);
      PICKLE_CHECK(n <= bytes_.size(), "string of ", n, " bytes runs past the end");
      stack_.push_back(make_string(Kind::string, size_t(n)));
      return;
    }
    case 'B': stack_.push_back(make_string(Kind::bytes, size_t(take_le(4)))); return;
    case 'C': stack_.push_back(make_string(Kind::bytes, size_t(take_le(1)))); return;
    case 'J': {
      Value* v = make(Kind::integer);
      v->integer = int32_t(uint32_t(take_le(4)));
      stack_.push_back(v);
      return;
    }
    case 'K':
    case 'M': {
      Value* v = make(Kind::integer);
      v->integer = int64_t(take_le(op == 'K' ? 1 : 2));
      stack_.push_back(v);
      return;
    }
    case 0x8a:    // LONG1
    case 0x8b: {  // LONG4
      const uint64_t n = take_le(op == 0x8a ? 1 : 4);
      if (n > 8) PICKLE_FAIL(Unsupported, "integer of ", n, " bytes does not fit 64 bits");
      auto raw = take(size_t(n));
      uint64_t bits = 0;
      for (size_t i = n; i-- > 0;) bits = (bits << 8) | raw[i];
      if (n > 0 && n < 8 && (raw[n - 1] & 0x80)) bits |= ~uint64_t(0) << (8 * n);  // sign
      Value* v = make(Kind::integer);
      v->integer = int64_t(bits);
      stack_.push_back(v);
      return;
    }
    case 'G': {  // BINFLOAT: big-endian IEEE double
      auto raw = take(8);
      uint64_t bits = 0;
      for (int i = 0; i < 8; ++i) bits = (bits << 8) | raw[i];
      Value* v = make(Kind::floating);
      std::memcpy(&v->floating, &bits, 8);
      stack_.push_back(v);
      return;
    }
    case 0x88:
    case 0x89: {
      Value* v = make(Kind::boolean);
      v->boolean = op == 0x88;
      stack_.push_back(v);
      return;
    }
    case 'N': stack_.push_back(make(Kind::none)); return;
    case 't': {
      const size_t mark = pop_mark();
      Value* v = make(Kind::tuple);
      v->items.assign(stack_.begin() + ptrdiff_t(mark), stack_.end());
      stack_.resize(mark);
      stack_.push_back(v);
      return;
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      const size_t n = size_t(op - 0x84);
      Value* v = make(Kind::tuple);
      v->items.resize(n);
      for (size_t i = n; i-- > 0;) v->items[i] = pop();
      stack_.push_back(v);
      return;
    }
    case 's': {
      const size_t floor = marks_.empty() ? 0 : marks_.back();
      PICKLE_CHECK(stack_.size() >= floor + 3, "stack underflow");
      set_items(*stack_[stack_.size() - 3], stack_.size() - 2);
      return;
    }
    case 'u': {
      const size_t mark = pop_mark();
      PICKLE_CHECK(mark > (marks_.empty() ? 0 : marks_.back()), "SETITEMS without a dict");
      set_items(*stack_[mark - 1], mark);
      return;
    }
    case 'a': {
      Value* item = pop();
      Value& list = top();
      PICKLE_CHECK(list.is(Kind::list), "APPEND to a ", kind_name(list.kind), ", not a list");
      list.items.push_back(item);
      return;
    }
    case 'e': {
      const size_t mark = pop_mark();
      PICKLE_CHECK(mark > (marks_.empty() ? 0 : marks_.back()), "APPENDS without a list");
      Value& list = *stack_[mark - 1];
      PICKLE_CHECK(list.is(Kind::list), "APPENDS to a ", kind_name(list.kind), ", not a list");
      list.items.insert(list.items.end(), stack_.begin() + ptrdiff_t(mark), stack_.end());
      stack_.resize(mark);
      return;
    }
    case 'q': memo_[take_le(1)] = &top(); return;
    case 'r': memo_[take_le(4)] = &top(); return;
    case 0x94: {
      Value* v = &top();
      memo_[memo_.size()] = v;
      return;
    }
    case 'h': stack_.push_back(memo_get(take_le(1))); return;
    case 'j': stack_.push_back(memo_get(take_le(4))); return;
    case 'c':
    case 0x93: {  // GLOBAL, STACK_GLOBAL
      std::string module, name;
      if (op == 'c') {
        module = take_line();
        name = take_line();
      } else {
        Value* n = pop();
        Value* m = pop();
        PICKLE_CHECK(m->is(Kind::string) && n->is(Kind::string), "STACK_GLOBAL needs two strings");
        module = m->text;
        name = n->text;
      }
      if (!hooks_.find_class) {
        PICKLE_FAIL(Unsupported, "global '", module, ".", name, "' is not allowed");
      }
      stack_.push_back(hooks_.find_class(*this, module, name));
      return;
    }
    case 'R': {
      Value* args = pop();
      Value* callable = pop();
      stack_.push_back(call(callable, args));
      return;
    }
    case 0x81: {  // NEWOBJ: cls.__new__(cls, *args)
      Value* args = pop();
      Value* cls = pop();
      stack_.push_back(call(cls, args));
      return;
    }
    case 'b': {
      Value* state = pop();
      Value& object = top();
      if (hooks_.build) hooks_.build(*this, object, *state);
      return;
    }
    case 'Q': {
      Value* pid = pop();
      if (!hooks_.persistent_load) PICKLE_FAIL(Unsupported, "persistent ids are not allowed");
      stack_.push_back(hooks_.persistent_load(*this, *pid));
      return;
    }
    default:
      PICKLE_FAIL(Unsupported, "unsupported pickle opcode 0x", "0123456789abcdef"[op >> 4],
                  "0123456789abcdef"[op & 15], " (only the opcodes of a state dict are read)");
  }
}

#undef PICKLE_CHECK
#undef PICKLE_FAIL

}  // namespace libai::checkpoint::pickle
