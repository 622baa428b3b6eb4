//! Reading and writing tensors in safetensors files: model inputs, reference outputs, checkpoints.
//!
//! ```no_run
//! use fuse_runtime::{tensor_file, Tensor};
//!
//! # fn main() -> fuse_runtime::Result<()> {
//! let x = Tensor::randn(&[2, 3], 1);
//! let ids = Tensor::from_i64(&[2], vec![4, 7])?;
//! tensor_file::save_tensors("inputs.safetensors", &[("x", &x), ("ids", &ids)])?;
//!
//! // Every tensor, in file order, with its stored dtype and shape.
//! let file = tensor_file::TensorFile::open("inputs.safetensors")?;
//! for info in file.tensors() {
//!     println!("{} {} {:?}", info.name, info.dtype, info.shape);
//! }
//! let x2 = file.read("x")?; // or file.read_all()?, or tensor_file::read_tensors(path)?
//! assert_eq!(x2, x);
//! # Ok(())
//! # }
//! ```
//!
//! [`Tensor`] holds f32 or i64. Reading widens f16 and bf16 to f32 (exactly: every half value is an f32) and i32
//! to i64; other stored dtypes (f64, integers of other widths, bool) are refused with their name rather than
//! converted with a loss. Writing stores f32 as `F32` and ids as `I64`.
//!
//! The file is checked before anything is read, and each problem is named: a tensor name given twice, a file
//! that ends before its last tensor (truncated), bytes past the last tensor, a tensor whose offsets do not match
//! its dtype and shape.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};

use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorData};

/// Headers above this size are refused before they are parsed (the limit the safetensors format sets).
const MAX_HEADER_BYTES: usize = 100_000_000;

/// How a tensor is stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoredDType {
    F32,
    F16,
    BF16,
    I64,
    I32,
    /// A dtype fuse's tensors cannot hold without a loss (`F64`, `U8`, `BOOL`, ...): listed, not read.
    Other(UnreadableDType),
}

/// A stored dtype that [`TensorFile::read`] refuses; its `Display` is the format's name (`F64`, `U8`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnreadableDType(Dtype);

impl StoredDType {
    fn of(dtype: Dtype) -> Self {
        match dtype {
            Dtype::F32 => StoredDType::F32,
            Dtype::F16 => StoredDType::F16,
            Dtype::BF16 => StoredDType::BF16,
            Dtype::I64 => StoredDType::I64,
            Dtype::I32 => StoredDType::I32,
            other => StoredDType::Other(UnreadableDType(other)),
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            StoredDType::F32 | StoredDType::I32 => 4,
            StoredDType::F16 | StoredDType::BF16 => 2,
            StoredDType::I64 => 8,
            StoredDType::Other(UnreadableDType(d)) => d.size(),
        }
    }

    /// Whether [`TensorFile::read`] turns it into a [`Tensor`] (f32 for the floats, i64 for the integers).
    pub fn is_readable(self) -> bool {
        !matches!(self, StoredDType::Other(_))
    }
}

impl fmt::Display for StoredDType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoredDType::Other(UnreadableDType(d)) => write!(f, "{d:?}"),
            StoredDType::F32 => f.write_str("F32"),
            StoredDType::F16 => f.write_str("F16"),
            StoredDType::BF16 => f.write_str("BF16"),
            StoredDType::I64 => f.write_str("I64"),
            StoredDType::I32 => f.write_str("I32"),
        }
    }
}

/// One tensor of a file as stored: name, dtype, shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub dtype: StoredDType,
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    data: (usize, usize),
}

/// A safetensors file checked and ready to read: list its tensors, then read some or all of them.
pub struct TensorFile {
    path: PathBuf,
    source: Source,
    /// Where the data section starts in the file.
    data_start: usize,
    /// In data order.
    tensors: Vec<TensorInfo>,
}

/// Where a [`TensorFile`]'s tensor bytes come from.
enum Source {
    /// The whole file, read at open.
    Memory(Vec<u8>),
    /// The open file: each tensor's bytes are read when it is (a checkpoint loaded one parameter at a time holds
    /// one tensor's bytes, not the file's). Behind a lock, as reading moves the file's cursor.
    File(std::sync::Mutex<std::fs::File>),
}

impl TensorFile {
    /// Reads and checks the file at `path` (a pipe too). Nothing is converted yet. A file larger than the memory
    /// the process may still use is [`Error::OutOfMemory`], before anything is read.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = std::fs::File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::read_whole(path, file)
    }

    /// Reads the open `file` whole and checks it.
    fn read_whole(path: &Path, mut file: std::fs::File) -> Result<Self> {
        use std::io::Read;
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        // A pipe's length is 0 here: its bytes are counted as they are read.
        let len = file.metadata().map_err(io)?.len();
        let mut bytes = crate::tensor::try_with_capacity(
            usize::try_from(len).unwrap_or(usize::MAX),
            "a tensor file",
        )?;
        file.read_to_end(&mut bytes).map_err(io)?;
        let (data_start, tensors) = parse_header(path, &bytes, bytes.len())?;
        Ok(TensorFile {
            path: path.to_path_buf(),
            source: Source::Memory(bytes),
            data_start,
            tensors,
        })
    }

    /// Reads and checks the header of the file at `path`, and keeps the file open: each tensor's bytes are read
    /// from it when that tensor is (a checkpoint loaded one parameter at a time). The file must not change
    /// while this is open; if it shrinks, a read is an [`Error::Io`]. What is not a file one can seek in (a pipe:
    /// `<(zcat model.safetensors.gz)`) is read whole, as [`TensorFile::open`] reads it.
    pub fn open_streaming(path: impl AsRef<Path>) -> Result<Self> {
        use std::io::Read;
        let path = path.as_ref();
        let io = |source| Error::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::File::open(path).map_err(io)?;
        let metadata = file.metadata().map_err(io)?;
        if !metadata.is_file() {
            // Read from this handle: opening a pipe again would wait for a writer that may be gone.
            return Self::read_whole(path, file);
        }
        let len = metadata.len();
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        // The header length, then the header (as far as the file has them): `parse_header` reports what is short.
        let mut head = Vec::new();
        (&mut file).take(8).read_to_end(&mut head).map_err(io)?;
        if let Some(prefix) = head.first_chunk::<8>() {
            let header_len = u64::from_le_bytes(*prefix).min(MAX_HEADER_BYTES as u64 + 1);
            (&mut file)
                .take(header_len)
                .read_to_end(&mut head)
                .map_err(io)?;
        }
        let (data_start, tensors) = parse_header(path, &head, len)?;
        Ok(TensorFile {
            path: path.to_path_buf(),
            source: Source::File(std::sync::Mutex::new(file)),
            data_start,
            tensors,
        })
    }
}

/// The data section's start and the tensors, in data order, of a safetensors file of `len` bytes whose first
/// bytes are `head` (at least the header length and the header, where the file has them), all checked: the
/// header's JSON, each tensor's dtype, shape and byte span, and that the spans tile the data section.
fn parse_header(path: &Path, head: &[u8], len: usize) -> Result<(usize, Vec<TensorInfo>)> {
    let path = path.to_path_buf();
    let invalid = |message: String| Error::Safetensors {
        path: path.clone(),
        message,
    };
    let Some(prefix) = head.first_chunk::<8>() else {
        return Err(invalid(format!(
            "the file looks truncated: it has {len} bytes, fewer than the 8 of its header length"
        )));
    };
    let header_len = usize::try_from(u64::from_le_bytes(*prefix)).unwrap_or(usize::MAX);
    if header_len > MAX_HEADER_BYTES {
        return Err(invalid(format!(
            "its header length is {header_len} bytes, more than the format's {MAX_HEADER_BYTES}; this is not a \
             safetensors file or its first 8 bytes are damaged"
        )));
    }
    // `len` is at least what `head` holds, unless the file shrank after its length was read.
    let after_prefix = len.saturating_sub(8);
    if header_len > after_prefix || 8 + header_len > head.len() {
        return Err(invalid(format!(
            "the file looks truncated: its header is {header_len} bytes, but only {after_prefix} bytes follow the \
             header length"
        )));
    }
    let data_start = 8 + header_len;
    let header: Header = serde_json::from_slice(&head[8..data_start])
        .map_err(|e| invalid(format!("its header is not valid JSON: {e}")))?;
    let mut seen = HashSet::new();
    let mut tensors = Vec::with_capacity(header.0.len());
    for (name, value) in header.0 {
        if name == "__metadata__" {
            continue;
        }
        if !seen.insert(name.clone()) {
            return Err(Error::DuplicateTensor {
                path: path.clone(),
                name,
            });
        }
        let info = tensor_info(name, &value).map_err(invalid)?;
        let (begin, end) = info.data;
        let span = end.checked_sub(begin).ok_or_else(|| {
            invalid(format!(
                "tensor `{}` has data offsets [{begin}, {end}], which end before they begin",
                info.name
            ))
        })?;
        let needed = info
            .shape
            .iter()
            .try_fold(info.dtype.size(), |n, &d| n.checked_mul(d));
        if needed != Some(span) {
            return Err(Error::TensorSize {
                path: path.clone(),
                tensor: info.name,
                dtype: info.dtype.to_string(),
                shape: info.shape,
                expected: needed,
                actual: span,
            });
        }
        tensors.push(info);
    }
    tensors.sort_by_key(|t| t.data);
    check_layout(&path, &tensors, len.saturating_sub(data_start))?;
    Ok((data_start, tensors))
}

impl TensorFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor's name, dtype and shape, in the order of their data in the file.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The stored dtype and shape of `name`, if the file has it.
    pub fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The tensor `name`: f32 for F32/F16/BF16, i64 for I64/I32, with its stored shape.
    pub fn read(&self, name: &str) -> Result<Tensor> {
        let info = self.info(name).ok_or_else(|| Error::MissingTensor {
            name: name.into(),
            path: self.path.clone(),
        })?;
        self.convert(info)
    }

    /// Every tensor, in file order, with its name.
    pub fn read_all(&self) -> Result<Vec<(String, Tensor)>> {
        self.tensors
            .iter()
            .map(|info| Ok((info.name.clone(), self.convert(info)?)))
            .collect()
    }

    fn convert(&self, info: &TensorInfo) -> Result<Tensor> {
        let data = self.data(info)?;
        let data = &data[..];
        match info.dtype {
            StoredDType::I64 => Tensor::from_i64(&info.shape, decode(data, i64::from_le_bytes)?),
            StoredDType::I32 => Tensor::from_i64(
                &info.shape,
                decode(data, |b: [u8; 4]| i64::from(i32::from_le_bytes(b)))?,
            ),
            dtype => match widen_to_f32(dtype, data) {
                Some(values) => Tensor::from_f32(&info.shape, values?),
                None => Err(Error::UnsupportedStoredDType {
                    name: info.name.clone(),
                    path: self.path.clone(),
                    found: dtype.to_string(),
                }),
            },
        }
    }

    /// The tensor's bytes (bounds checked when the file was opened): borrowed from memory, or read from the
    /// open file.
    pub(crate) fn data(&self, info: &TensorInfo) -> Result<std::borrow::Cow<'_, [u8]>> {
        let (begin, end) = (self.data_start + info.data.0, self.data_start + info.data.1);
        match &self.source {
            Source::Memory(bytes) => Ok(std::borrow::Cow::Borrowed(&bytes[begin..end])),
            Source::File(file) => {
                use std::io::{Read, Seek, SeekFrom};
                let io = |source| Error::Io {
                    path: self.path.clone(),
                    source,
                };
                let mut bytes =
                    crate::tensor::try_with_capacity(end - begin, "a checkpoint tensor")?;
                bytes.resize(end - begin, 0u8);
                // A poisoned lock only means another read panicked; the cursor is set before every read.
                let mut file = file.lock().unwrap_or_else(|e| e.into_inner());
                file.seek(SeekFrom::Start(begin as u64)).map_err(io)?;
                file.read_exact(&mut bytes).map_err(io)?;
                Ok(std::borrow::Cow::Owned(bytes))
            }
        }
    }
}

/// A float tensor's elements as f32 ([`Error::OutOfMemory`] where they do not fit), or `None` for a dtype that is
/// not a float of at most 32 bits.
pub(crate) fn widen_to_f32(dtype: StoredDType, data: &[u8]) -> Option<Result<Vec<f32>>> {
    match dtype {
        StoredDType::F32 => Some(decode(data, f32::from_le_bytes)),
        StoredDType::F16 => Some(decode(data, |b| half::f16::from_le_bytes(b).to_f32())),
        StoredDType::BF16 => Some(decode(data, |b| half::bf16::from_le_bytes(b).to_f32())),
        _ => None,
    }
}

/// `data` as values of `N` little-endian bytes each, converted by `value`, in memory checked to fit (a file's
/// f16 tensor takes twice its bytes as f32). Goes through byte chunks because safetensors gives no alignment
/// guarantee for the data.
fn decode<T, const N: usize>(data: &[u8], value: impl Fn([u8; N]) -> T) -> Result<Vec<T>> {
    let chunks = data.chunks_exact(N);
    let mut out = crate::tensor::try_with_capacity(chunks.len(), "a checkpoint tensor")?;
    out.extend(chunks.filter_map(|c| c.try_into().ok()).map(value));
    Ok(out)
}

/// Every tensor of the file at `path`, in file order, with its name (see [`TensorFile::read`] for dtypes).
pub fn read_tensors(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    TensorFile::open(path)?.read_all()
}

/// Writes named tensors to a safetensors file: f32 as `F32`, ids as `I64`. Names must be unique.
pub fn save_tensors(path: impl AsRef<Path>, names_and_tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    let invalid = |message: String| Error::Safetensors {
        path: path.to_path_buf(),
        message,
    };
    let mut seen = HashSet::new();
    let mut buffers = Vec::with_capacity(names_and_tensors.len());
    for (name, tensor) in names_and_tensors {
        // The format keeps this key for the file's metadata: a reader would not take it as a tensor.
        if *name == "__metadata__" {
            return Err(invalid(
                "`__metadata__` is the format's key for metadata, not a tensor name".into(),
            ));
        }
        if !seen.insert(*name) {
            return Err(Error::DuplicateTensor {
                path: path.to_path_buf(),
                name: (*name).into(),
            });
        }
        let (dtype, bytes): (Dtype, Vec<u8>) = match tensor.data() {
            TensorData::F32(v) => (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            TensorData::I64(v) => (Dtype::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
        };
        buffers.push((*name, dtype, tensor.shape().to_vec(), bytes));
    }
    let views = buffers
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            TensorView::new(*dtype, shape.clone(), bytes)
                .map(|view| (*name, view))
                .map_err(|e| invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let serialized = safetensors::serialize(views, &None).map_err(|e| invalid(e.to_string()))?;
    std::fs::write(path, serialized).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The tensors must tile the data section: the first starts at 0, each starts where the one before ends, and the
/// last ends where the file does.
fn check_layout(path: &Path, tensors: &[TensorInfo], data_len: usize) -> Result<()> {
    let mut end = 0;
    for t in tensors {
        if t.data.0 != end {
            return Err(Error::Safetensors {
                path: path.to_path_buf(),
                message: format!(
                    "tensor `{}` starts at byte {} of the data, but the tensor before it ends at {end}: the \
                     offsets overlap or leave a gap",
                    t.name, t.data.0
                ),
            });
        }
        if t.data.1 > data_len {
            return Err(Error::TruncatedFile {
                path: path.to_path_buf(),
                tensor: t.name.clone(),
                needed: t.data.1,
                available: data_len,
            });
        }
        end = t.data.1;
    }
    if end != data_len {
        return Err(Error::TrailingBytes {
            path: path.to_path_buf(),
            last: tensors.last().map(|t| t.name.clone()),
            end,
            actual: data_len,
        });
    }
    Ok(())
}

/// One header entry: `{"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]}`.
fn tensor_info(name: String, value: &serde_json::Value) -> std::result::Result<TensorInfo, String> {
    let bad = |what: &str| format!("tensor `{name}` has {what} in the header");
    let dtype_name = value
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or_else(|| bad("no dtype"))?;
    let dtype: Dtype = serde_json::from_value(serde_json::Value::String(dtype_name.into()))
        .map_err(|_| bad(&format!("an unknown dtype `{dtype_name}`")))?;
    let sizes = |key: &str| -> Option<Vec<usize>> {
        value
            .get(key)?
            .as_array()?
            .iter()
            .map(|v| v.as_u64().and_then(|n| usize::try_from(n).ok()))
            .collect()
    };
    let shape = sizes("shape").ok_or_else(|| bad("no valid shape"))?;
    let offsets = sizes("data_offsets")
        .filter(|o| o.len() == 2)
        .ok_or_else(|| bad("no valid data_offsets"))?;
    Ok(TensorInfo {
        name,
        dtype: StoredDType::of(dtype),
        shape,
        data: (offsets[0], offsets[1]),
    })
}

/// The header's entries in file order, duplicates kept (a JSON map would silently keep only the last one).
struct Header(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Header;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object of tensor entries")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Header, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    entries.push(entry);
                }
                Ok(Header(entries))
            }
        }
        d.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("fuse-runtime-tensor-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join(format!("{tag}.safetensors"))
    }

    #[test]
    fn tensors_round_trip_with_names_shapes_and_dtypes() {
        let path = temp_path("round_trip");
        let a = Tensor::randn(&[2, 3, 5], 11);
        let scalar = Tensor::from_f32(&[], vec![-0.75]).expect("scalar");
        let ids = Tensor::uniform_ids(&[4, 7], 1000, 3);
        save_tensors(&path, &[("a", &a), ("ids", &ids), ("scalar", &scalar)]).expect("saved");

        let file = TensorFile::open(&path).expect("opens");
        let mut listed: Vec<(&str, StoredDType, &[usize])> = file
            .tensors()
            .iter()
            .map(|t| (t.name.as_str(), t.dtype, t.shape.as_slice()))
            .collect();
        listed.sort_by_key(|(name, _, _)| *name);
        assert_eq!(
            listed,
            [
                ("a", StoredDType::F32, &[2, 3, 5][..]),
                ("ids", StoredDType::I64, &[4, 7][..]),
                ("scalar", StoredDType::F32, &[][..]),
            ]
        );
        assert_eq!(file.read("a").expect("a"), a);
        assert_eq!(file.read("ids").expect("ids"), ids);
        assert_eq!(file.read("scalar").expect("scalar"), scalar);

        let mut all = read_tensors(&path).expect("all");
        all.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(
            all,
            [
                ("a".to_string(), a),
                ("ids".to_string(), ids),
                ("scalar".to_string(), scalar)
            ]
        );
        match file.read("b") {
            Err(Error::MissingTensor { name, .. }) => assert_eq!(name, "b"),
            other => panic!("expected MissingTensor, got {other:?}"),
        }
        // Read from the open file, tensor by tensor, the same values.
        let streamed = TensorFile::open_streaming(&path).expect("opens");
        assert_eq!(streamed.tensors(), file.tensors());
        assert_eq!(
            streamed.read_all().expect("all"),
            file.read_all().expect("all")
        );
        std::fs::remove_file(&path).expect("removed");
    }

    #[test]
    fn a_streamed_file_is_checked_as_a_read_one_and_a_shrunk_one_is_an_io_error() {
        let path = temp_path("streamed");
        let a = Tensor::randn(&[64, 64], 5);
        save_tensors(&path, &[("a", &a), ("b", &a)]).expect("saved");
        let whole = std::fs::read(&path).expect("read");
        // Cut inside the header, then inside the data: both opens refuse both files with the same message.
        for cut in [12, whole.len() - 100] {
            std::fs::write(&path, &whole[..cut]).expect("written");
            let messages = [
                TensorFile::open(&path).err().map(|e| e.to_string()),
                TensorFile::open_streaming(&path)
                    .err()
                    .map(|e| e.to_string()),
            ];
            assert!(messages[0].is_some(), "cut at {cut} was accepted");
            assert_eq!(messages[0], messages[1], "cut at {cut}");
        }
        // The file shrinks after it was checked: reading what is gone is an I/O error, never a wrong value.
        std::fs::write(&path, &whole).expect("written");
        let streamed = TensorFile::open_streaming(&path).expect("opens");
        std::fs::write(&path, &whole[..whole.len() - 100]).expect("shrunk");
        assert_eq!(streamed.read("a").expect("a is whole"), a);
        match streamed.read("b") {
            Err(Error::Io { .. }) => {}
            other => panic!("expected Io, got {other:?}"),
        }
        std::fs::remove_file(&path).expect("removed");
    }

    /// A pipe (`<(zcat model.safetensors.gz)`) has no length to read ahead: both opens read it whole, and its
    /// tensors are the file's. Before, the streaming open took its length, 0, less 8.
    #[cfg(unix)]
    #[test]
    fn a_pipe_is_read_whole_by_both_opens() {
        let path = temp_path("piped");
        let a = Tensor::randn(&[16, 8], 6);
        let ids = Tensor::uniform_ids(&[5], 100, 2);
        save_tensors(&path, &[("a", &a), ("ids", &ids)]).expect("saved");
        let whole = std::fs::read(&path).expect("read");
        let fifo = temp_path("fifo");
        let _ = std::fs::remove_file(&fifo);
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: mkfifo is not available");
            return;
        }
        for streaming in [false, true] {
            let writer = {
                let (fifo, whole) = (fifo.clone(), whole.clone());
                std::thread::spawn(move || std::fs::write(fifo, whole))
            };
            let file = if streaming {
                TensorFile::open_streaming(&fifo)
            } else {
                TensorFile::open(&fifo)
            };
            writer.join().expect("writer").expect("written");
            let file = file.unwrap_or_else(|e| panic!("streaming {streaming}: {e}"));
            assert_eq!(file.read("a").expect("a"), a);
            assert_eq!(file.read("ids").expect("ids"), ids);
        }
        std::fs::remove_file(&fifo).expect("removed");
        std::fs::remove_file(&path).expect("removed");
    }

    /// The format's metadata key is no tensor name: a file saved with it would not read back.
    #[test]
    fn the_metadata_key_is_refused_as_a_tensor_name() {
        let path = temp_path("metadata");
        let a = Tensor::randn(&[2], 1);
        match save_tensors(&path, &[("a", &a), ("__metadata__", &a)]) {
            Err(Error::Safetensors { message, .. }) => assert!(message.contains("__metadata__")),
            other => panic!("expected Safetensors, got {other:?}"),
        }
        assert!(!path.exists(), "nothing is written");
    }

    /// Values every half format holds exactly, so the widened f32 must equal them bit for bit.
    fn exact_values() -> Vec<f32> {
        (0..24).map(|i| (i as f32 - 12.0) * 0.125).collect()
    }

    #[test]
    fn half_floats_widen_to_f32_and_i32_to_i64() {
        let path = temp_path("halves");
        let values = exact_values();
        let f16: Vec<u8> = values
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect();
        let bf16: Vec<u8> = values
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect();
        let ints: Vec<i32> = vec![-3, 0, 7, i32::MAX];
        let i32_bytes: Vec<u8> = ints.iter().flat_map(|x| x.to_le_bytes()).collect();
        let f64_bytes: Vec<u8> = [1.5f64, 2.5].iter().flat_map(|x| x.to_le_bytes()).collect();
        let views = vec![
            (
                "h",
                TensorView::new(Dtype::F16, vec![4, 6], &f16).expect("view"),
            ),
            (
                "b",
                TensorView::new(Dtype::BF16, vec![24], &bf16).expect("view"),
            ),
            (
                "i",
                TensorView::new(Dtype::I32, vec![2, 2], &i32_bytes).expect("view"),
            ),
            (
                "d",
                TensorView::new(Dtype::F64, vec![2], &f64_bytes).expect("view"),
            ),
        ];
        std::fs::write(
            &path,
            safetensors::serialize(views, &None).expect("serialised"),
        )
        .expect("written");

        let file = TensorFile::open(&path).expect("opens");
        assert_eq!(file.info("h").map(|t| t.dtype), Some(StoredDType::F16));
        assert_eq!(file.info("b").map(|t| t.dtype), Some(StoredDType::BF16));
        let h = file.read("h").expect("h");
        assert_eq!((h.shape(), h.as_f32()), (&[4, 6][..], Some(&values[..])));
        let b = file.read("b").expect("b");
        assert_eq!((b.shape(), b.as_f32()), (&[24][..], Some(&values[..])));
        let i = file.read("i").expect("i");
        let wide: Vec<i64> = ints.iter().map(|&x| x as i64).collect();
        assert_eq!((i.shape(), i.as_i64()), (&[2, 2][..], Some(&wide[..])));

        let d = file.info("d").expect("listed");
        assert_eq!(
            (d.dtype.to_string(), d.dtype.is_readable()),
            ("F64".to_string(), false)
        );
        match file.read("d") {
            Err(Error::UnsupportedStoredDType { name, found, .. }) => {
                assert_eq!((name.as_str(), found.as_str()), ("d", "F64"))
            }
            other => panic!("expected UnsupportedStoredDType, got {other:?}"),
        }
        assert!(matches!(
            file.read_all(),
            Err(Error::UnsupportedStoredDType { .. })
        ));
        std::fs::remove_file(&path).expect("removed");
    }

    #[test]
    fn saving_a_name_twice_is_refused() {
        let path = temp_path("twice");
        let t = Tensor::zeros(&[2]);
        match save_tensors(&path, &[("t", &t), ("t", &t)]) {
            Err(Error::DuplicateTensor { name, .. }) => assert_eq!(name, "t"),
            other => panic!("expected DuplicateTensor, got {other:?}"),
        }
    }
}
