//! Float vectors on the wire: [`Tensor`] (f32 or f16) and MT-HFL's [`Eigenpairs`].

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

use super::ProtocolError;

/// How a tensor's elements are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// IEEE 754 binary32, little-endian (4 bytes per element).
    F32,
    /// IEEE 754 binary16, little-endian (2 bytes per element; uploads only).
    F16,
}

impl Encoding {
    /// Bytes per element.
    pub fn width(self) -> usize {
        match self {
            Encoding::F32 => 4,
            Encoding::F16 => 2,
        }
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Encoding::F32 => "f32",
            Encoding::F16 => "f16",
        })
    }
}

impl core::str::FromStr for Encoding {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Encoding::F32),
            "f16" => Ok(Encoding::F16),
            _ => Err(format!("unknown encoding {s:?} (expected f32 or f16)")),
        }
    }
}

/// A flat vector of floats on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tensor {
    /// Element encoding.
    pub encoding: Encoding,
    /// The elements, little-endian.
    pub bytes: Vec<u8>,
}

impl Tensor {
    /// Encodes `values` (f16 rounds to nearest).
    pub fn encode(values: &[f32], encoding: Encoding) -> Tensor {
        let mut bytes = Vec::with_capacity(values.len() * encoding.width());
        for &v in values {
            match encoding {
                Encoding::F32 => bytes.extend_from_slice(&v.to_le_bytes()),
                Encoding::F16 => bytes.extend_from_slice(&half::f16::from_f32(v).to_le_bytes()),
            }
        }
        Tensor { encoding, bytes }
    }

    /// Number of elements (rounded down).
    pub fn len(&self) -> usize {
        self.bytes.len() / self.encoding.width()
    }

    /// True without elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decodes to f32, checking the element count (when `expected` is given) and that every
    /// value is finite.
    pub fn decode(&self, expected: Option<usize>) -> Result<Vec<f32>, ProtocolError> {
        let w = self.encoding.width();
        if !self.bytes.len().is_multiple_of(w) {
            return Err(ProtocolError::TensorBytes {
                bytes: self.bytes.len(),
                encoding: self.encoding,
            });
        }
        if let Some(expected) = expected
            && expected != self.len()
        {
            return Err(ProtocolError::TensorLength {
                expected,
                got: self.len(),
            });
        }
        let mut out = Vec::with_capacity(self.len());
        for (i, c) in self.bytes.chunks_exact(w).enumerate() {
            let v = match self.encoding {
                Encoding::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                Encoding::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f32(),
            };
            if !v.is_finite() {
                return Err(ProtocolError::NotFinite(i));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// `n ≥ 1` MT-HFL data signatures of one shape: each the `k` leading eigenvalues (largest first)
/// and unit eigenvectors (`k × d`, row-major) of a client's Gram matrix. One client uploads its
/// own (`n = 1`); the relay carries everyone's, client `j`'s at position `j`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Eigenpairs {
    /// Eigenpairs per signature.
    pub k: u32,
    /// Dimension of the feature space.
    pub d: u32,
    /// `n·k` eigenvalues; signature `j`'s at `j·k .. (j + 1)·k`.
    pub values: Tensor,
    /// `n·k·d` eigenvector floats; signature `j`'s at `j·k·d .. (j + 1)·k·d`.
    pub vectors: Tensor,
}

impl Eigenpairs {
    /// Encodes `values` (`n·k`) and `vectors` (`n·k·d`) of `n` signatures.
    pub fn encode(k: usize, d: usize, values: &[f32], vectors: &[f32], encoding: Encoding) -> Self {
        Eigenpairs {
            k: k as u32,
            d: d as u32,
            values: Tensor::encode(values, encoding),
            vectors: Tensor::encode(vectors, encoding),
        }
    }

    /// Decodes `count` signatures of `k` eigenpairs in dimension `d`: the shape must be the one
    /// expected, the tensors must hold exactly `count·k` and `count·k·d` finite floats. Returns
    /// (eigenvalues, eigenvectors).
    pub fn decode(
        &self,
        count: usize,
        k: usize,
        d: usize,
    ) -> Result<(Vec<f32>, Vec<f32>), ProtocolError> {
        let width = self.values.encoding.width();
        let got = if self.k == 0 {
            0
        } else {
            self.values.bytes.len() / width / self.k as usize
        };
        if self.k as usize != k || self.d as usize != d || got != count {
            return Err(ProtocolError::EigenShape {
                count: got,
                k: self.k,
                d: self.d,
                expected_count: count,
                expected_k: k,
                expected_d: d,
            });
        }
        let values = self.values.decode(Some(count * k))?;
        let vectors = self.vectors.decode(Some(count * k * d))?;
        Ok((values, vectors))
    }
}
