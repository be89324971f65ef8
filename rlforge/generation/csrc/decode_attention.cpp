// The two matmuls of one decode step's attention on CPU, for rlforge's KVDecoder (see cpu_kernels.py).
//
// A decode step attends G query rows (the query heads of one KV head) to one row's cache: batched GEMVs of
// [G x D] @ [D x S] and [G x S] @ [S x D] for every (row, KV head). torch.bmm hands these to MKL's small-matrix
// path, which reads the cache at ~11-20 GB/s on a core that streams 45-70 GB/s; the cache read is most of a step.
// Here keys are stored transposed ([D, L] per row and head), so both products are plain vertical FMAs over
// contiguous memory: scores vectorise over the key columns, the value mix over the head dimension, and neither
// needs a horizontal sum. Fixed-width inner loops are vectorised by the compiler (-O3 with the ISA flags of
// torch's own CPU capability); queries are taken in chunks of <= 4 so the accumulators stay in registers.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>

namespace {

constexpr int64_t kLanes = 16;  // floats per 512-bit vector (two AVX2 vectors)
constexpr int kMaxChunk = 4;    // query rows per pass

// out[g, w] = scale * sum_d q[g, d] * kt[d, w] for NB * kLanes key columns (kt's rows are ld apart). The same
// columns of the next (row, KV head), ``ahead`` floats further, are prefetched meanwhile: each one's cache is a
// separate tile, which the hardware prefetcher would only find after a few misses (~1.3x from DRAM, measured).
template <int G, int NB>
void score_block(const float* __restrict__ q, int64_t D, const float* __restrict__ kt, int64_t ld, float scale,
                 float* __restrict__ out, int64_t out_stride, int64_t ahead) {
  constexpr int64_t W = NB * kLanes;
  float acc[G][W] = {};
  for (int64_t d = 0; d < D; ++d) {
    const float* k = kt + d * ld;
    if (ahead != 0) {
      for (int64_t w = 0; w < W; w += kLanes) __builtin_prefetch(k + ahead + w);
    }
    for (int g = 0; g < G; ++g) {
      const float qd = q[g * D + d];
#pragma omp simd
      for (int64_t w = 0; w < W; ++w) acc[g][w] += qd * k[w];
    }
  }
  for (int g = 0; g < G; ++g) {
#pragma omp simd
    for (int64_t w = 0; w < W; ++w) out[g * out_stride + w] = acc[g][w] * scale;
  }
}

template <int G>
void score_rows(const float* q, int64_t D, const float* kt, int64_t ld, int64_t S, float scale, float* out,
                int64_t ahead) {
  int64_t j = 0;
  for (; j + 4 * kLanes <= S; j += 4 * kLanes) score_block<G, 4>(q, D, kt + j, ld, scale, out + j, S, ahead);
  for (; j + kLanes <= S; j += kLanes) score_block<G, 1>(q, D, kt + j, ld, scale, out + j, S, ahead);
  for (; j < S; ++j) {
    for (int g = 0; g < G; ++g) {
      float acc = 0.f;
      for (int64_t d = 0; d < D; ++d) acc += q[g * D + d] * kt[d * ld + j];
      out[g * S + j] = acc * scale;
    }
  }
}

// out[g, w] = sum_j p[g, j] * v[j, w] for NB * kLanes value columns (v's rows are ld apart); two key streams
// in flight so the FMA chains do not wait on each other, and the next tile prefetched as in score_block.
template <int G, int NB>
void mix_block(const float* __restrict__ p, int64_t S, const float* __restrict__ v, int64_t ld,
               float* __restrict__ out, int64_t D, int64_t ahead) {
  constexpr int64_t W = NB * kLanes;
  float a0[G][W] = {}, a1[G][W] = {};
  int64_t j = 0;
  for (; j + 2 <= S; j += 2) {
    const float* v0 = v + j * ld;
    const float* v1 = v0 + ld;
    if (ahead != 0) {
      for (int64_t w = 0; w < W; w += kLanes) {
        __builtin_prefetch(v0 + ahead + w);
        __builtin_prefetch(v1 + ahead + w);
      }
    }
    for (int g = 0; g < G; ++g) {
      const float w0 = p[g * S + j], w1 = p[g * S + j + 1];
#pragma omp simd
      for (int64_t w = 0; w < W; ++w) {
        a0[g][w] += w0 * v0[w];
        a1[g][w] += w1 * v1[w];
      }
    }
  }
  if (j < S) {
    for (int g = 0; g < G; ++g) {
      const float w0 = p[g * S + j];
#pragma omp simd
      for (int64_t w = 0; w < W; ++w) a0[g][w] += w0 * v[j * ld + w];
    }
  }
  for (int g = 0; g < G; ++g) {
#pragma omp simd
    for (int64_t w = 0; w < W; ++w) out[g * D + w] = a0[g][w] + a1[g][w];
  }
}

template <int G>
void mix_rows(const float* p, int64_t S, const float* v, int64_t ld, int64_t D, float* out, int64_t ahead) {
  int64_t c = 0;
  for (; c + 2 * kLanes <= D; c += 2 * kLanes) mix_block<G, 2>(p, S, v + c, ld, out + c, D, ahead);
  for (; c + kLanes <= D; c += kLanes) mix_block<G, 1>(p, S, v + c, ld, out + c, D, ahead);
  for (; c < D; ++c) {
    for (int g = 0; g < G; ++g) {
      float acc = 0.f;
      for (int64_t j = 0; j < S; ++j) acc += p[g * S + j] * v[j * ld + c];
      out[g * D + c] = acc;
    }
  }
}

// Calls fn<chunk>(first query row, chunk) over the G query rows in chunks of at most kMaxChunk.
template <template <int> class Fn, typename... Args>
void by_chunks(int64_t G, Args... args) {
  for (int64_t g = 0; g < G; g += kMaxChunk) {
    switch (std::min<int64_t>(kMaxChunk, G - g)) {
      case 1: Fn<1>::run(g, args...); break;
      case 2: Fn<2>::run(g, args...); break;
      case 3: Fn<3>::run(g, args...); break;
      default: Fn<4>::run(g, args...); break;
    }
  }
}

template <int C>
struct ScoreChunk {
  static void run(int64_t g, const float* q, int64_t D, const float* kt, int64_t ld, int64_t S, float scale,
                  float* out, int64_t ahead) {
    score_rows<C>(q + g * D, D, kt, ld, S, scale, out + g * S, ahead);
  }
};

template <int C>
struct MixChunk {
  static void run(int64_t g, const float* p, int64_t S, const float* v, int64_t ld, int64_t D, float* out,
                  int64_t ahead) {
    mix_rows<C>(p + g * S, S, v, ld, D, out + g * D, ahead);
  }
};

// t itself when its last dimension is unit-stride (the kernels take any other strides), else a contiguous copy.
at::Tensor unit_last_stride(const at::Tensor& t) { return t.stride(2) == 1 ? t : t.contiguous(); }

// fn(n, ahead) for every (row, KV head) n on torch's intra-op threads; ahead is the offset of the next tile the
// same thread reads (0 after its last), which the kernels prefetch.
template <typename Fn>
void for_each_tile(int64_t N, int64_t tile_stride, const Fn& fn) {
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) fn(n, n + 1 < end ? tile_stride : 0);
  });
}

void check_cpu_float(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 3, op, ": ", name,
              " must be a 3-D float32 CPU tensor, got ", t.scalar_type(), " ", t.sizes(), " on ", t.device());
}

// scores [N, G, S] of queries q [N, G, D] against keys stored transposed, keys_t [N, D, S] (any row strides).
at::Tensor decode_scores(const at::Tensor& q, const at::Tensor& keys_t, double scale) {
  check_cpu_float(q, "decode_scores", "q");
  check_cpu_float(keys_t, "decode_scores", "keys_t");
  const int64_t N = q.size(0), G = q.size(1), D = q.size(2), S = keys_t.size(2);
  TORCH_CHECK(keys_t.size(0) == N && keys_t.size(1) == D, "decode_scores: keys_t ", keys_t.sizes(),
              " does not match q ", q.sizes());
  const at::Tensor qc = q.contiguous();
  const at::Tensor kc = unit_last_stride(keys_t);
  at::Tensor out = at::empty({N, G, S}, q.options());
  const float* qp = qc.const_data_ptr<float>();
  const float* kp = kc.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t k_row = kc.stride(0), ld = kc.stride(1);
  const float s = static_cast<float>(scale);
  for_each_tile(N, k_row, [&](int64_t n, int64_t ahead) {
    by_chunks<ScoreChunk>(G, qp + n * G * D, D, kp + n * k_row, ld, S, s, op + n * G * S, ahead);
  });
  return out;
}

// out [N, G, D] = probs [N, G, S] @ values [N, S, D] (values' rows any stride apart).
at::Tensor decode_mix(const at::Tensor& probs, const at::Tensor& values) {
  check_cpu_float(probs, "decode_mix", "probs");
  check_cpu_float(values, "decode_mix", "values");
  const int64_t N = probs.size(0), G = probs.size(1), S = probs.size(2), D = values.size(2);
  TORCH_CHECK(values.size(0) == N && values.size(1) == S, "decode_mix: values ", values.sizes(),
              " does not match probs ", probs.sizes());
  const at::Tensor pc = probs.contiguous();
  const at::Tensor vc = unit_last_stride(values);
  at::Tensor out = at::empty({N, G, D}, probs.options());
  const float* pp = pc.const_data_ptr<float>();
  const float* vp = vc.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t v_row = vc.stride(0), ld = vc.stride(1);
  for_each_tile(N, v_row, [&](int64_t n, int64_t ahead) {
    by_chunks<MixChunk>(G, pp + n * G * S, S, vp + n * v_row, ld, D, op + n * G * D, ahead);
  });
  return out;
}

}  // namespace

TORCH_LIBRARY(rlforge, m) {
  m.def("decode_scores(Tensor q, Tensor keys_t, float scale) -> Tensor");
  m.def("decode_mix(Tensor probs, Tensor values) -> Tensor");
}

TORCH_LIBRARY_IMPL(rlforge, CPU, m) {
  m.impl("decode_scores", &decode_scores);
  m.impl("decode_mix", &decode_mix);
}
