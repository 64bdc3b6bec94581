"""A small DLRM-style click model in PyTorch whose embedding tables live in recemb.

Four categorical features (the item shown, the user's recently watched items, the item's
category, the user's country) are looked up in three recemb tables ("item" is shared by two
features); a tiny MLP on top of them and two dense features predicts a click. The embeddings are
trained by recemb's fused Adagrad inside loss.backward(); the MLP by torch.optim.Adam. The data
are synthetic: clicks follow hidden item, country and category effects and item-user affinities,
so the loss falls well below that of predicting the base rate.

Run (after building the Python package, see docs/python.md):
    PYTHONPATH=build/python/python /usr/bin/python3 examples/torch_dlrm.py
"""

import time

import numpy as np
import torch

import recemb
import recemb.torch

NUM_ITEMS, NUM_CATEGORIES, NUM_COUNTRIES = 500, 20, 30
DIM, BATCH, STEPS = 8, 256, 300


class Data:
    """Synthetic click logs with a fixed hidden structure."""

    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.item_category = rng.integers(0, NUM_CATEGORIES, size=NUM_ITEMS)
        self.item_vector = rng.normal(size=(NUM_ITEMS, 4))
        self.country_vector = rng.normal(size=(NUM_COUNTRIES, 4))
        self.item_bias = rng.normal(scale=1.5, size=NUM_ITEMS)
        self.country_bias = rng.normal(scale=0.5, size=NUM_COUNTRIES)
        self.category_bias = rng.normal(scale=0.5, size=NUM_CATEGORIES)

    def batch(self, size):
        rng = self.rng
        item = rng.integers(0, NUM_ITEMS, size=size)
        country = rng.integers(0, NUM_COUNTRIES, size=size)
        lengths = rng.integers(0, 6, size=size)
        history = rng.integers(0, NUM_ITEMS, size=lengths.sum())
        dense = rng.normal(size=(size, 2)).astype(np.float32)
        history_mean = np.zeros((size, 4))
        splits = np.concatenate([[0], np.cumsum(lengths)])
        for b in range(size):
            if lengths[b]:
                history_mean[b] = self.item_vector[history[splits[b]:splits[b + 1]]].mean(0)
        affinity = np.einsum("bd,bd->b", self.item_vector[item],
                             self.country_vector[country] + history_mean)
        logit = (self.item_bias[item] + self.country_bias[country] +
                 self.category_bias[self.item_category[item]] + 0.5 * affinity +
                 0.5 * dense[:, 0] - 1.0)
        label = (rng.random(size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        features = {
            "item": torch.from_numpy(item),
            "history": recemb.Ragged(torch.from_numpy(history), torch.from_numpy(splits)),
            "category": torch.from_numpy(self.item_category[item]),
            "country": torch.from_numpy(country),
        }
        return features, torch.from_numpy(dense), torch.from_numpy(label)


class ClickModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        item = recemb.TableConfig(NUM_ITEMS, DIM, name="item")
        category = recemb.TableConfig(NUM_CATEGORIES, DIM, name="category")
        country = recemb.TableConfig(NUM_COUNTRIES, DIM, name="country")
        self.embedding = recemb.torch.Embedding(
            {"item": recemb.FeatureConfig(item), "history": recemb.FeatureConfig(item),
             "category": recemb.FeatureConfig(category),
             "country": recemb.FeatureConfig(country)},
            # A small initial accumulator: the gradients of a mean loss over a batch are small.
            recemb.optimizers.Adagrad(learning_rate=0.1, initial_accumulator_value=0.001))
        self.mlp = torch.nn.Sequential(torch.nn.Linear(4 * DIM + 2 + 2 * DIM, 32),
                                       torch.nn.ReLU(), torch.nn.Linear(32, 1))

    def forward(self, features, dense):
        e = self.embedding(features)
        # Explicit item x context interactions, as DLRM's dot products.
        interactions = [e["item"] * e["country"], e["item"] * e["history"]]
        flat = [e["item"], e["history"], e["category"], e["country"], dense] + interactions
        return self.mlp(torch.cat(flat, dim=1)).squeeze(1)


def main():
    torch.manual_seed(0)
    data = Data(seed=0)
    model = ClickModel()
    dense_optimizer = torch.optim.Adam(model.mlp.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    test_features, test_dense, test_labels = data.batch(4096)

    def test_loss():
        with torch.no_grad():  # a pure lookup: nothing is kept for training
            return float(loss_fn(model(test_features, test_dense), test_labels))

    base_rate = float(test_labels.mean())
    base_loss = -(base_rate * np.log(base_rate) + (1 - base_rate) * np.log(1 - base_rate))
    print(f"predicting the base rate {base_rate:.3f} gives loss {base_loss:.4f}")
    print(f"step {0:4d}  test loss {test_loss():.4f}")
    start = time.perf_counter()
    running = []
    for step in range(1, STEPS + 1):
        features, dense, labels = data.batch(BATCH)
        loss = loss_fn(model(features, dense), labels)
        dense_optimizer.zero_grad()
        loss.backward()  # also applies recemb's Adagrad to the touched embedding rows
        dense_optimizer.step()
        running.append(float(loss))
        if step % 50 == 0:
            print(f"step {step:4d}  train loss {np.mean(running):.4f}  test loss "
                  f"{test_loss():.4f}")
            running = []
    print(f"{STEPS} steps in {time.perf_counter() - start:.1f} s; embedding step counter "
          f"{model.embedding.step}")


if __name__ == "__main__":
    main()
