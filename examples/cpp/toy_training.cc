// Trains the embeddings of a toy click model with recemb and prints its loss falling.
//
// Every user and every item has a hidden "true" vector, and a user clicks an item with probability
// sigmoid(<true_user, true_item>). The model learns one embedding per user and one per item (two
// tables, dim 8), predicts logit = <user_embedding, item_embedding> and minimises the log loss,
// summed over the batch, with recemb's fused Adagrad. The dense part of the model is that dot
// product, so the gradients with respect to the activations have closed forms, computed here:
//   dL/dlogit = sigmoid(logit) - label
//   dL/d(user_embedding) = dL/dlogit * item_embedding, and the other way round for the item.
// Each batch is drawn afresh, so the training loss is also the test loss: its mean per example
// falls from log(2) towards that of the true model, which is printed next to it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <vector>

#include "recemb/recemb.h"

namespace {

constexpr int64_t kNumUsers = 500;
constexpr int64_t kNumItems = 500;
constexpr int64_t kDim = 8;
constexpr int64_t kBatchSize = 256;
constexpr int kNumSteps = 3000;
constexpr int kReportEvery = 250;

float dot(std::span<const float> a, std::span<const float> b) {
  float sum = 0.0f;
  for (size_t d = 0; d < a.size(); ++d) sum += a[d] * b[d];
  return sum;
}

// log(1 + exp(logit)) - label * logit, without overflow.
double log_loss(double logit, double label) {
  return std::max(logit, 0.0) - label * logit + std::log1p(std::exp(-std::abs(logit)));
}

std::span<const float> row(const std::vector<float>& matrix, int64_t index) {
  return std::span<const float>(matrix).subspan(static_cast<size_t>(index * kDim), kDim);
}

}  // namespace

int main() {
  std::mt19937_64 rng(42);  // fixed seed: the same run every time
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> true_users(kNumUsers * kDim), true_items(kNumItems * kDim);
  for (float& x : true_users) x = normal(rng);
  for (float& x : true_items) x = normal(rng);
  std::uniform_int_distribution<int64_t> pick_user(0, kNumUsers - 1), pick_item(0, kNumItems - 1);

  recemb::Embedding model({{.name = "user", .vocabulary_size = kNumUsers, .dim = kDim},
                           {.name = "item", .vocabulary_size = kNumItems, .dim = kDim}},
                          {{.name = "user", .table = "user"}, {.name = "item", .table = "item"}},
                          {.optimizer = recemb::Adagrad{.learning_rate = 0.3f}, .seed = 1});

  // The inputs are views of these arrays, refilled in place each step; the outputs are ours too.
  std::vector<int64_t> users(kBatchSize), items(kBatchSize);
  std::vector<float> labels(kBatchSize);
  std::vector<float> user_activations(kBatchSize * kDim), item_activations(kBatchSize * kDim);
  std::vector<float> user_gradients(kBatchSize * kDim), item_gradients(kBatchSize * kDim);
  const std::vector<recemb::FeatureInput> inputs = {
      recemb::DenseIds{.ids = std::span<const int64_t>(users), .shape = {kBatchSize}},
      recemb::DenseIds{.ids = std::span<const int64_t>(items), .shape = {kBatchSize}}};
  const std::vector<std::span<float>> activations = {user_activations, item_activations};
  const std::vector<std::span<const float>> gradients = {user_gradients, item_gradients};
  recemb::LookupBatch batch;  // what apply_gradients needs from the lookup, reused every step

  double loss_sum = 0.0, true_loss_sum = 0.0, first_loss = 0.0, last_loss = 0.0;
  int64_t count = 0;
  std::printf("step   log loss   (true model)\n");
  for (int step = 1; step <= kNumSteps; ++step) {
    for (int64_t b = 0; b < kBatchSize; ++b) {
      users[b] = pick_user(rng);
      items[b] = pick_item(rng);
      const float true_logit = dot(row(true_users, users[b]), row(true_items, items[b]));
      labels[b] =
          std::bernoulli_distribution(1.0 / (1.0 + std::exp(-true_logit)))(rng) ? 1.0f : 0.0f;
      true_loss_sum += log_loss(true_logit, labels[b]);
    }

    model.lookup(inputs, activations, batch);
    for (int64_t b = 0; b < kBatchSize; ++b) {
      const auto user = row(user_activations, b), item = row(item_activations, b);
      const float logit = dot(user, item);
      loss_sum += log_loss(logit, labels[b]);
      const float gradient = 1.0f / (1.0f + std::exp(-logit)) - labels[b];
      for (int64_t d = 0; d < kDim; ++d) {
        user_gradients[b * kDim + d] = gradient * item[d];
        item_gradients[b * kDim + d] = gradient * user[d];
      }
    }
    model.apply_gradients(batch, gradients);

    count += kBatchSize;
    if (step == 1 || step % kReportEvery == 0) {
      last_loss = loss_sum / static_cast<double>(count);
      if (step == 1) first_loss = last_loss;
      std::printf("%4d   %.4f     (%.4f)\n", step, last_loss,
                  true_loss_sum / static_cast<double>(count));
      loss_sum = true_loss_sum = 0.0;
      count = 0;
    }
  }
  std::printf("log loss fell from %.4f to %.4f in %d steps of %lld examples\n", first_loss,
              last_loss, kNumSteps, static_cast<long long>(kBatchSize));
  return last_loss < first_loss ? 0 : 1;
}
