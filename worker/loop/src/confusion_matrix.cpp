#include "ddp/loop/confusion_matrix.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace ddp::loop {

ConfusionMatrix::ConfusionMatrix(int num_classes) : n_(num_classes) {
  if (num_classes <= 0) throw std::invalid_argument("ConfusionMatrix: num_classes must be > 0");
  counts_.assign(static_cast<std::size_t>(n_) * n_, 0);
}

void ConfusionMatrix::add(int target, int predicted) {
  if (target < 0 || target >= n_ || predicted < 0 || predicted >= n_)
    throw std::out_of_range("ConfusionMatrix: class (" + std::to_string(target) + ", " +
                            std::to_string(predicted) + ") outside [0, " + std::to_string(n_) + ")");
  ++counts_[static_cast<std::size_t>(target) * n_ + predicted];
}

void ConfusionMatrix::merge(const ConfusionMatrix& other) {
  if (other.n_ != n_) throw std::invalid_argument("ConfusionMatrix: merging different sizes");
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
}

ConfusionMatrix ConfusionMatrix::from_counts(int num_classes, const std::vector<std::int64_t>& counts) {
  ConfusionMatrix m(num_classes);
  if (counts.size() != m.counts_.size())
    throw std::invalid_argument("ConfusionMatrix: expected " + std::to_string(m.counts_.size()) +
                                " counts, got " + std::to_string(counts.size()));
  m.counts_ = counts;
  return m;
}

std::int64_t ConfusionMatrix::total() const {
  return std::accumulate(counts_.begin(), counts_.end(), std::int64_t{0});
}

double ConfusionMatrix::accuracy() const {
  const std::int64_t t = total();
  if (t == 0) return 0.0;
  std::int64_t correct = 0;
  for (int c = 0; c < n_; ++c) correct += at(c, c);
  return static_cast<double>(correct) / static_cast<double>(t);
}

double ConfusionMatrix::class_f1(int c) const {
  std::int64_t tp = at(c, c), fp = 0, fn = 0;
  for (int k = 0; k < n_; ++k) {
    if (k == c) continue;
    fp += at(k, c);
    fn += at(c, k);
  }
  const std::int64_t denom = 2 * tp + fp + fn;
  return denom == 0 ? 0.0 : 2.0 * static_cast<double>(tp) / static_cast<double>(denom);
}

double ConfusionMatrix::macro_f1() const {
  double sum = 0.0;
  int present = 0;
  for (int c = 0; c < n_; ++c) {
    std::int64_t seen = 0;
    for (int k = 0; k < n_; ++k) seen += at(c, k) + at(k, c);
    if (seen == 0) continue;
    sum += class_f1(c);
    ++present;
  }
  return present == 0 ? 0.0 : sum / present;
}

double ConfusionMatrix::micro_f1() const {
  // Pooled TP = trace, pooled FP = pooled FN = off-diagonal sum, so
  // 2TP / (2TP + FP + FN) = trace / total.
  std::int64_t tp = 0;
  for (int c = 0; c < n_; ++c) tp += at(c, c);
  const std::int64_t t = total();
  const std::int64_t off = t - tp;
  const std::int64_t denom = 2 * tp + 2 * off;
  return denom == 0 ? 0.0 : 2.0 * static_cast<double>(tp) / static_cast<double>(denom);
}

}  // namespace ddp::loop
