//! The part of Python's pickle format that the pickled data sets use: dicts, lists, tuples,
//! numbers, strings and NumPy arrays, as written by Python 2's `cPickle` (the CIFAR-10 and
//! CIFAR-100 "python versions" that torchvision downloads) and by Python 3 at any protocol
//! (2-5, NumPy's `_reconstruct` and `_frombuffer` forms both).
//!
//! This is a reader of data, not an unpickler: no Python object is ever built or called. A
//! `GLOBAL` is kept as its name; a call (`REDUCE`) is evaluated only for the few callables that
//! make NumPy arrays and byte strings (`numpy…_reconstruct`, `numpy…_frombuffer`, `numpy.dtype`,
//! `_codecs.encode`) and is otherwise kept as an inert [`Value::Call`]. Byte strings are spans of
//! the input ([`Value::Bytes`]), so an array of 30 MB is not copied while parsing.
//!
//! Opcodes are those of CPython's `Lib/pickletools.py`; an opcode outside the subset, a stack
//! underflow or a truncated argument is a [`PickleError`] naming the byte offset.

use std::collections::HashMap;
use std::ops::Range;
use std::rc::Rc;

/// A pickle that cannot be read: where, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pickle byte {offset}: {reason}")]
pub struct PickleError {
    /// Byte offset of the opcode.
    pub offset: usize,
    /// What is wrong.
    pub reason: String,
}

/// A value of the pickle's stack.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `None`.
    None,
    /// `True` / `False`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// A float.
    Float(f64),
    /// A byte string (Python 2 `str`, Python 3 `bytes`, `bytearray`): a span of the input.
    Bytes(Range<usize>),
    /// A byte string made while parsing (`_codecs.encode(text, "latin1")`).
    OwnedBytes(Rc<Vec<u8>>),
    /// A text string.
    Str(Rc<str>),
    /// A list.
    List(Vec<Value>),
    /// A tuple.
    Tuple(Vec<Value>),
    /// A dict, in insertion order.
    Dict(Vec<(Value, Value)>),
    /// A global name, `module.name`, not looked up.
    Global(Rc<str>, Rc<str>),
    /// A NumPy dtype: its `str` (`u1`, `i8`, `f4`…) and byte order (`<`, `>`, `|`, `=`).
    Dtype(Rc<str>, char),
    /// A NumPy array.
    Array(Rc<NdArray>),
    /// Any other call, `callable(*args)` with the state given by `BUILD`, not evaluated.
    Call(Box<Value>, Box<Value>),
}

/// A NumPy array's description and its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct NdArray {
    /// The element type, e.g. `u1`.
    pub dtype: Rc<str>,
    /// `<`, `>`, `|` or `=`.
    pub byte_order: char,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Fortran (column-major) order.
    pub fortran: bool,
    /// The raw bytes, as a [`Value::Bytes`] or [`Value::OwnedBytes`].
    pub data: Value,
}

impl Value {
    /// The value under the text key `key` of a dict.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let Value::Dict(items) = self else {
            return None;
        };
        items
            .iter()
            .find_map(|(k, v)| (k.text() == Some(key)).then_some(v))
    }

    /// [`get`](Self::get), also matching byte-string keys (Python 2's `str`) in `input`.
    pub fn get_in<'a>(&'a self, input: &[u8], key: &str) -> Option<&'a Value> {
        let Value::Dict(items) = self else {
            return None;
        };
        items.iter().find_map(|(k, v)| {
            (k.bytes(input) == Some(key.as_bytes()) || k.text() == Some(key)).then_some(v)
        })
    }

    /// Its text, for a [`Value::Str`].
    pub fn text(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Its bytes, for a byte string, in `input`.
    pub fn bytes<'a>(&'a self, input: &'a [u8]) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(r) => input.get(r.clone()),
            Value::OwnedBytes(b) => Some(b),
            _ => None,
        }
    }

    /// The integers of a list or tuple of ints, or of a one-dimensional integer array, in `input`.
    pub fn ints(&self, input: &[u8]) -> Option<Vec<i64>> {
        match self {
            Value::List(items) | Value::Tuple(items) => items
                .iter()
                .map(|v| match v {
                    Value::Int(i) => Some(*i),
                    Value::Bool(b) => Some(i64::from(*b)),
                    _ => None,
                })
                .collect(),
            Value::Array(a) if a.shape.len() == 1 => a.ints(input),
            _ => None,
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "a bool",
            Value::Int(_) => "an int",
            Value::Float(_) => "a float",
            Value::Bytes(_) | Value::OwnedBytes(_) => "a byte string",
            Value::Str(_) => "a string",
            Value::List(_) => "a list",
            Value::Tuple(_) => "a tuple",
            Value::Dict(_) => "a dict",
            Value::Global(..) => "a global name",
            Value::Dtype(..) => "a NumPy dtype",
            Value::Array(_) => "a NumPy array",
            Value::Call(..) => "an object",
        }
    }
}

impl NdArray {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of one element, for the integer and float dtypes.
    pub fn item_size(&self) -> Option<usize> {
        let d = self.dtype.trim_start_matches(['<', '>', '|', '=']);
        let (kind, size) = d.split_at(1);
        matches!(kind, "u" | "i" | "f" | "b")
            .then(|| size.parse().ok())
            .flatten()
    }

    /// The bytes of the array, in `input`.
    pub fn raw<'a>(&'a self, input: &'a [u8]) -> Option<&'a [u8]> {
        self.data.bytes(input)
    }

    /// The elements of an integer array as `i64` (little- or big-endian as its dtype says).
    pub fn ints(&self, input: &[u8]) -> Option<Vec<i64>> {
        let d = self.dtype.trim_start_matches(['<', '>', '|', '=']);
        let signed = match d.as_bytes().first() {
            Some(b'i') => true,
            Some(b'u' | b'b') => false,
            _ => return None,
        };
        let size = self.item_size()?;
        let raw = self.raw(input)?;
        if raw.len() != self.len() * size || !matches!(size, 1 | 2 | 4 | 8) {
            return None;
        }
        let big = self.byte_order == '>' || self.dtype.starts_with('>');
        Some(
            raw.chunks_exact(size)
                .map(|c| {
                    let mut b = [0u8; 8];
                    if big {
                        for (i, &x) in c.iter().rev().enumerate() {
                            b[i] = x;
                        }
                    } else {
                        b[..size].copy_from_slice(c);
                    }
                    if signed && c[if big { 0 } else { size - 1 }] & 0x80 != 0 {
                        for x in &mut b[size..] {
                            *x = 0xff;
                        }
                    }
                    i64::from_le_bytes(b)
                })
                .collect(),
        )
    }
}

/// Parses one pickle (up to its `STOP`) from `input`.
///
/// # Errors
///
/// [`PickleError`] naming the offset of an opcode outside the subset, a truncated argument, a
/// stack or memo error, or a NumPy array whose state is not one NumPy writes.
pub fn parse(input: &[u8]) -> Result<Value, PickleError> {
    Parser {
        input,
        pos: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run()
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl<'a> Parser<'a> {
    fn run(mut self) -> Result<Value, PickleError> {
        loop {
            let at = self.pos;
            let err = |reason: String| PickleError { offset: at, reason };
            let op = self.take(1).map_err(&err)?[0];
            match op {
                0x80 => {
                    let proto = self.take(1).map_err(&err)?[0];
                    if proto > 5 {
                        return Err(err(format!("protocol {proto} (this reader knows 0-5)")));
                    }
                }
                0x95 => {
                    self.take(8).map_err(&err)?; // FRAME: a length hint
                }
                b'.' => {
                    return self.pop().map_err(err);
                }
                b'(' => self.marks.push(self.stack.len()),
                b'}' => self.stack.push(Value::Dict(Vec::new())),
                b']' => self.stack.push(Value::List(Vec::new())),
                b')' => self.stack.push(Value::Tuple(Vec::new())),
                b'd' => {
                    let items = self.pop_mark().map_err(&err)?;
                    let dict = pairs(items).map_err(&err)?;
                    self.stack.push(Value::Dict(dict));
                }
                b'l' => {
                    let items = self.pop_mark().map_err(&err)?;
                    self.stack.push(Value::List(items));
                }
                b't' => {
                    let items = self.pop_mark().map_err(&err)?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return Err(err("stack underflow".into()));
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(items));
                }
                b's' => {
                    let v = self.pop().map_err(&err)?;
                    let k = self.pop().map_err(&err)?;
                    self.top_dict().map_err(&err)?.push((k, v));
                }
                b'u' => {
                    let items = self.pop_mark().map_err(&err)?;
                    let new = pairs(items).map_err(&err)?;
                    self.top_dict().map_err(&err)?.extend(new);
                }
                b'a' => {
                    let v = self.pop().map_err(&err)?;
                    self.top_list().map_err(&err)?.push(v);
                }
                b'e' => {
                    let items = self.pop_mark().map_err(&err)?;
                    self.top_list().map_err(&err)?.extend(items);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'K' => {
                    let b = self.take(1).map_err(&err)?[0];
                    self.stack.push(Value::Int(i64::from(b)));
                }
                b'M' => {
                    let b = self.take(2).map_err(&err)?;
                    self.stack
                        .push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
                }
                b'J' => {
                    let b = self.take(4).map_err(&err)?;
                    let v = i32::from_le_bytes(b.try_into().expect("4 bytes"));
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    let n = usize::from(self.take(1).map_err(&err)?[0]);
                    let b = self.take(n).map_err(&err)?;
                    if n > 8 {
                        return Err(err(format!("an integer of {n} bytes")));
                    }
                    let mut full = [if b.last().is_some_and(|x| x & 0x80 != 0) {
                        0xff
                    } else {
                        0
                    }; 8];
                    full[..n].copy_from_slice(b);
                    self.stack.push(Value::Int(i64::from_le_bytes(full)));
                }
                b'I' | b'L' => {
                    let line = self.line().map_err(&err)?;
                    let text = line.trim_end_matches('L');
                    let v = match text {
                        "00" => Value::Bool(false),
                        "01" => Value::Bool(true),
                        t => Value::Int(t.parse().map_err(|_| err(format!("integer {t:?}")))?),
                    };
                    self.stack.push(v);
                }
                b'G' => {
                    let b = self.take(8).map_err(&err)?;
                    let v = f64::from_be_bytes(b.try_into().expect("8 bytes"));
                    self.stack.push(Value::Float(v));
                }
                b'U' | b'C' => {
                    let n = usize::from(self.take(1).map_err(&err)?[0]);
                    let r = self.span(n).map_err(&err)?;
                    self.stack.push(Value::Bytes(r));
                }
                b'T' | b'B' => {
                    let n = self.len_le(4).map_err(&err)?;
                    let r = self.span(n).map_err(&err)?;
                    self.stack.push(Value::Bytes(r));
                }
                0x8e | 0x96 => {
                    let n = self.len_le(8).map_err(&err)?;
                    let r = self.span(n).map_err(&err)?;
                    self.stack.push(Value::Bytes(r));
                }
                0x8c => {
                    let n = usize::from(self.take(1).map_err(&err)?[0]);
                    let s = self.text(n).map_err(&err)?;
                    self.stack.push(Value::Str(s));
                }
                b'X' => {
                    let n = self.len_le(4).map_err(&err)?;
                    let s = self.text(n).map_err(&err)?;
                    self.stack.push(Value::Str(s));
                }
                0x8d => {
                    let n = self.len_le(8).map_err(&err)?;
                    let s = self.text(n).map_err(&err)?;
                    self.stack.push(Value::Str(s));
                }
                b'c' => {
                    let module = self.line().map_err(&err)?;
                    let name = self.line().map_err(&err)?;
                    self.stack.push(Value::Global(module.into(), name.into()));
                }
                0x93 => {
                    let name = self.pop().map_err(&err)?;
                    let module = self.pop().map_err(&err)?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.stack.push(Value::Global(m, n)),
                        _ => return Err(err("STACK_GLOBAL of non-strings".into())),
                    }
                }
                b'R' | 0x81 => {
                    let args = self.pop().map_err(&err)?;
                    let callable = self.pop().map_err(&err)?;
                    let v = self.call(callable, args).map_err(&err)?;
                    self.stack.push(v);
                }
                b'b' => {
                    let state = self.pop().map_err(&err)?;
                    let obj = self.pop().map_err(&err)?;
                    let v = build(obj, state).map_err(&err)?;
                    self.stack.push(v);
                }
                b'q' => {
                    let k = u32::from(self.take(1).map_err(&err)?[0]);
                    self.put(k).map_err(&err)?;
                }
                b'r' => {
                    let k = self.len_le(4).map_err(&err)? as u32;
                    self.put(k).map_err(&err)?;
                }
                0x94 => {
                    let k = self.memo.len() as u32;
                    self.put(k).map_err(&err)?;
                }
                b'p' => {
                    let line = self.line().map_err(&err)?;
                    let k = line
                        .parse()
                        .map_err(|_| err(format!("memo key {line:?}")))?;
                    self.put(k).map_err(&err)?;
                }
                b'h' => {
                    let k = u32::from(self.take(1).map_err(&err)?[0]);
                    self.get(k).map_err(&err)?;
                }
                b'j' => {
                    let k = self.len_le(4).map_err(&err)? as u32;
                    self.get(k).map_err(&err)?;
                }
                b'g' => {
                    let line = self.line().map_err(&err)?;
                    let k = line
                        .parse()
                        .map_err(|_| err(format!("memo key {line:?}")))?;
                    self.get(k).map_err(&err)?;
                }
                0x97 | 0x98 => {
                    return Err(err(
                        "an out-of-band buffer (protocol 5 with buffer_callback): re-save the file \
                         without one"
                            .into(),
                    ));
                }
                other => {
                    return Err(err(format!(
                        "opcode 0x{other:02x} is outside what data files use (is this a pickle of a \
                         data set?)"
                    )));
                }
            }
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let input = self.input;
        let end = self.pos.checked_add(n).filter(|&e| e <= self.input.len());
        let Some(end) = end else {
            return Err(format!(
                "{n} bytes wanted, {} left: the file is cut short",
                self.input.len() - self.pos
            ));
        };
        let s = &input[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn span(&mut self, n: usize) -> Result<Range<usize>, String> {
        let start = self.pos;
        self.take(n)?;
        Ok(start..start + n)
    }

    fn len_le(&mut self, size: usize) -> Result<usize, String> {
        let b = self.take(size)?;
        let mut full = [0u8; 8];
        full[..size].copy_from_slice(b);
        usize::try_from(u64::from_le_bytes(full)).map_err(|_| "a length past memory".to_string())
    }

    fn text(&mut self, n: usize) -> Result<Rc<str>, String> {
        let b = self.take(n)?;
        std::str::from_utf8(b)
            .map(Rc::from)
            .map_err(|_| "a string that is not UTF-8".to_string())
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.input[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("a line without its end")?;
        let line = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(line)
    }

    fn pop(&mut self) -> Result<Value, String> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("stack underflow past a mark".into());
        }
        self.stack.pop().ok_or_else(|| "stack underflow".into())
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let m = self.marks.pop().ok_or("no mark")?;
        Ok(self.stack.split_off(m))
    }

    fn top_dict(&mut self) -> Result<&mut Vec<(Value, Value)>, String> {
        match self.stack.last_mut() {
            Some(Value::Dict(d)) => Ok(d),
            Some(v) => Err(format!("SETITEM on {}", v.describe())),
            None => Err("stack underflow".into()),
        }
    }

    fn top_list(&mut self) -> Result<&mut Vec<Value>, String> {
        match self.stack.last_mut() {
            Some(Value::List(l)) => Ok(l),
            Some(v) => Err(format!("APPEND on {}", v.describe())),
            None => Err("stack underflow".into()),
        }
    }

    fn put(&mut self, k: u32) -> Result<(), String> {
        let v = self.stack.last().ok_or("memo of an empty stack")?.clone();
        self.memo.insert(k, v);
        Ok(())
    }

    fn get(&mut self, k: u32) -> Result<(), String> {
        let v = self
            .memo
            .get(&k)
            .ok_or_else(|| format!("memo {k} never set"))?;
        self.stack.push(v.clone());
        Ok(())
    }

    /// Evaluates the calls that make arrays and byte strings; keeps any other inert.
    fn call(&self, callable: Value, args: Value) -> Result<Value, String> {
        let Value::Global(module, name) = &callable else {
            return Ok(Value::Call(Box::new(callable), Box::new(args)));
        };
        let numpy = module.starts_with("numpy");
        let Value::Tuple(a) = &args else {
            return Ok(Value::Call(Box::new(callable), Box::new(args)));
        };
        match (&**module, &**name) {
            (_, "_reconstruct") if numpy => Ok(Value::Array(Rc::new(NdArray {
                dtype: "".into(),
                byte_order: '|',
                shape: Vec::new(),
                fortran: false,
                data: Value::None,
            }))),
            (_, "dtype") if numpy => match a.first() {
                Some(Value::Str(s)) => Ok(Value::Dtype(s.clone(), '|')),
                Some(Value::Bytes(r)) => Ok(Value::Dtype(
                    String::from_utf8_lossy(&self.input[r.clone()]).into(),
                    '|',
                )),
                _ => Err("numpy.dtype of something else than a type string".into()),
            },
            (_, "_frombuffer") if numpy => match a.as_slice() {
                [data, Value::Dtype(d, order), shape, Value::Str(fo)] => {
                    Ok(Value::Array(Rc::new(NdArray {
                        dtype: d.clone(),
                        byte_order: *order,
                        shape: dims(shape)?,
                        fortran: &**fo == "F",
                        data: data.clone(),
                    })))
                }
                _ => Err("numpy _frombuffer with other arguments than NumPy writes".into()),
            },
            ("_codecs", "encode") => match a.as_slice() {
                [Value::Str(s), Value::Str(enc)] if enc.eq_ignore_ascii_case("latin1") => s
                    .chars()
                    .map(|c| {
                        u8::try_from(u32::from(c))
                            .map_err(|_| "a latin-1 string past 255".to_string())
                    })
                    .collect::<Result<Vec<u8>, _>>()
                    .map(|b| Value::OwnedBytes(Rc::new(b))),
                _ => Ok(Value::Call(Box::new(callable), Box::new(args))),
            },
            _ => Ok(Value::Call(Box::new(callable), Box::new(args))),
        }
    }
}

/// `BUILD`: a NumPy array's or dtype's state; any other object keeps the state as its call's.
fn build(obj: Value, state: Value) -> Result<Value, String> {
    match obj {
        Value::Array(_) => {
            let Value::Tuple(s) = state else {
                return Err("a NumPy array's state that is not a tuple".into());
            };
            // (version, shape, dtype, is_fortran, rawdata); version 1 for NumPy ≥ 1.0.
            let [_, shape, Value::Dtype(d, order), fortran, data] = s.as_slice() else {
                return Err(format!("a NumPy array's state of {} items", s.len()));
            };
            let fortran = matches!(fortran, Value::Bool(true) | Value::Int(1));
            if !matches!(data, Value::Bytes(_) | Value::OwnedBytes(_)) {
                return Err(format!(
                    "a NumPy array of {} (an object array?), not raw bytes",
                    data.describe()
                ));
            }
            Ok(Value::Array(Rc::new(NdArray {
                dtype: d.clone(),
                byte_order: *order,
                shape: dims(shape)?,
                fortran,
                data: data.clone(),
            })))
        }
        Value::Dtype(d, _) => {
            // (version, byte order, subarray, names, fields, elsize, alignment, flags).
            let order = match &state {
                Value::Tuple(s) => match s.get(1) {
                    Some(Value::Str(o)) => o.chars().next().unwrap_or('|'),
                    _ => '|',
                },
                _ => '|',
            };
            Ok(Value::Dtype(d, order))
        }
        other => Ok(other),
    }
}

fn dims(shape: &Value) -> Result<Vec<usize>, String> {
    match shape {
        Value::Tuple(t) | Value::List(t) => t
            .iter()
            .map(|v| match v {
                Value::Int(i) => usize::try_from(*i).map_err(|_| format!("a dimension of {i}")),
                _ => Err("a shape of something else than ints".into()),
            })
            .collect(),
        Value::Int(i) => usize::try_from(*i)
            .map(|n| vec![n])
            .map_err(|_| format!("a dimension of {i}")),
        _ => Err("a shape that is not a tuple".into()),
    }
}

fn pairs(items: Vec<Value>) -> Result<Vec<(Value, Value)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err("an odd number of items for a dict".into());
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps({'a': [1, 300, -2], 'b': (None, True)}, protocol=2)` from CPython 3.11,
    /// byte for byte.
    #[test]
    fn a_python_dict_reads_back() {
        let p: &[u8] = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01M,\x01J\xfe\xff\xff\xffeX\x01\x00\x00\x00bq\x03N\x88\x86q\x04u.";
        let v = parse(p).unwrap();
        assert_eq!(v.get("a").unwrap().ints(p).unwrap(), vec![1, 300, -2]);
        assert_eq!(
            v.get("b").unwrap(),
            &Value::Tuple(vec![Value::None, Value::Bool(true)])
        );
    }

    #[test]
    fn a_cut_file_names_its_offset() {
        let p: &[u8] = b"\x80\x02}q\x00(X\x05\x00\x00\x00ab";
        let e = parse(p).unwrap_err();
        assert_eq!(e.offset, 6, "{e}");
        assert!(e.reason.contains("cut short"), "{e}");
        let e = parse(b"\x80\x02cos\nsystem\n(X\x02\x00\x00\x00lstR\x00").unwrap_err();
        assert!(e.reason.contains("opcode 0x00"), "{e}");
    }

    #[test]
    fn a_call_of_another_global_is_never_evaluated() {
        let p: &[u8] = b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.";
        match parse(p).unwrap() {
            Value::Call(c, _) => assert_eq!(*c, Value::Global("os".into(), "system".into())),
            v => panic!("{v:?}"),
        }
    }
}
