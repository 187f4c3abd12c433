#pragma once
// Classification metrics from a confusion matrix: accuracy, macro-F1 and
// micro-F1 as scikit-learn defines them (the seeds' validate() uses
// sklearn's f1_score). Counts are plain integers so ranks can sum their
// matrices with one all-reduce and every test sample is counted once.

#include <cstdint>
#include <vector>

namespace ddp::loop {

class ConfusionMatrix {
 public:
  explicit ConfusionMatrix(int num_classes);

  int num_classes() const { return n_; }
  // Counts one sample; throws std::out_of_range for a class outside [0, n).
  void add(int target, int predicted);
  // Adds another matrix of the same size (e.g. one all-reduced from ranks).
  void merge(const ConfusionMatrix& other);

  std::int64_t at(int target, int predicted) const { return counts_[target * n_ + predicted]; }
  std::int64_t total() const;

  // Row-major counts [target][predicted], for all-reduce and back.
  const std::vector<std::int64_t>& counts() const { return counts_; }
  static ConfusionMatrix from_counts(int num_classes, const std::vector<std::int64_t>& counts);

  double accuracy() const;
  // Unweighted mean of per-class F1 over the classes that occur as a target
  // or a prediction (sklearn's f1_score(average='macro') averages over the
  // labels present); 0 when the matrix is empty.
  double macro_f1() const;
  // F1 over all decisions pooled; for single-label data it equals accuracy.
  double micro_f1() const;
  // Per-class F1 (used by macro_f1, handy for reports and tests).
  double class_f1(int c) const;

 private:
  int n_;
  std::vector<std::int64_t> counts_;
};

}  // namespace ddp::loop
