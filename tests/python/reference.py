"""Float64 references for the Python tests, written for clarity from docs/semantics.md; they share
nothing with the engine (plain loops over bags and rows).

A feature's input is turned into "slots": (output index, [(id, weight), ...]) pairs, one per
activation row (a bag, or a sequence position), which both the lookup and the gradient use.
"""

import math

import numpy as np


def _entries(ids, weights):
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    weights = [1.0] * len(ids) if weights is None else [float(w) for w in
                                                         np.asarray(weights).reshape(-1)]
    return list(zip(ids, weights))


def slots(kind, ids, weights, max_sequence_length=0):
    """[(output index, entries)] and the output shape (without dim) of one feature's input.

    kind: "dense" (ids an array), "ragged" ((values, row_splits)) or "sparse"
    ((indices, values, dense_shape)); weights in the matching layout (values only) or None."""
    result = []
    if kind == "dense":
        ids = np.asarray(ids)
        flat_weights = None if weights is None else np.asarray(weights, np.float64)
        if ids.ndim == 1:
            for b in range(ids.shape[0]):
                result.append(((b,), _entries(ids[b:b + 1], None if flat_weights is None
                                                else flat_weights[b:b + 1])))
            return result, (ids.shape[0],)
        rows = list(np.ndindex(*ids.shape[:-1]))
        if max_sequence_length and ids.ndim == 2:
            length = max_sequence_length
            for b in range(ids.shape[0]):
                for p in range(min(ids.shape[1], length)):
                    w = None if flat_weights is None else flat_weights[b, p:p + 1]
                    result.append(((b, p), _entries(ids[b, p:p + 1], w)))
            return result, (ids.shape[0], length)
        for index in rows:
            w = None if flat_weights is None else flat_weights[index]
            result.append((index, _entries(ids[index], w)))
        return result, ids.shape[:-1]
    if kind == "ragged":
        values, splits = ids
        values = np.asarray(values)
        batch = len(splits) - 1
        for b in range(batch):
            begin, end = int(splits[b]), int(splits[b + 1])
            w = None if weights is None else np.asarray(weights)[begin:end]
            entries = _entries(values[begin:end], w)
            if max_sequence_length:
                for p, entry in enumerate(entries[:max_sequence_length]):
                    result.append(((b, p), [entry]))
            else:
                result.append(((b,), entries))
        return result, ((batch, max_sequence_length) if max_sequence_length else (batch,))
    indices, values, dense_shape = ids
    indices = np.asarray(indices)
    bags = {}
    for k, index in enumerate(indices):
        w = None if weights is None else np.asarray(weights)[k:k + 1]
        entry = _entries(np.asarray(values)[k:k + 1], w)[0]
        bag = tuple(int(i) for i in index[:-1])
        if max_sequence_length and len(dense_shape) == 2:
            if index[-1] < max_sequence_length:
                result.append(((bag[0], int(index[-1])), [entry]))
        else:
            bags.setdefault(bag, []).append(entry)
    if max_sequence_length and len(dense_shape) == 2:
        return result, (dense_shape[0], max_sequence_length)
    for bag in np.ndindex(*dense_shape[:-1]):
        result.append((bag, bags.get(bag, [])))
    return result, tuple(dense_shape[:-1])


def gains(entries, combiner):
    """The weight of each entry's row in the combined activation."""
    weights = [w for _, w in entries]
    if combiner == "sum":
        scale = 1.0
    elif combiner == "mean":
        total = sum(weights)
        scale = 0.0 if total == 0 else 1.0 / total
    else:
        total = math.sqrt(sum(w * w for w in weights))
        scale = 0.0 if total == 0 else 1.0 / total
    return [w * scale for w in weights]


def lookup(table, feature_slots, shape, combiner):
    out = np.zeros(tuple(shape) + (table.shape[1],))
    for index, entries in feature_slots:
        for (row, _), gain in zip(entries, gains(entries, combiner)):
            out[index] += gain * table[row]
    return out


def accumulate(gradient_rows, feature_slots, combiner, gradient):
    """Adds each slot's gradient, times each entry's gain, to gradient_rows[row]."""
    gradient = np.asarray(gradient, np.float64)
    for index, entries in feature_slots:
        for (row, _), gain in zip(entries, gains(entries, combiner)):
            gradient_rows.setdefault(row, 0.0)
            gradient_rows[row] = gradient_rows[row] + gain * gradient[index]


class Optimizer:
    """A float64 optimizer: hyperparameters as a dict (recemb's names), slots per table."""

    def __init__(self, name, learning_rate, **hyper):
        self.name = name
        self.learning_rate = learning_rate
        self.hyper = hyper

    def slots(self, vocabulary_size, dim):
        h = self.hyper
        if self.name == "adagrad":
            return {"accumulators": np.full((vocabulary_size, dim),
                                            h.get("initial_accumulator_value", 0.1))}
        if self.name == "adagrad_momentum":
            return {"accumulators": np.zeros((vocabulary_size, dim)),
                    "momenta": np.zeros((vocabulary_size, dim))}
        if self.name == "adam":
            return {"momenta": np.zeros((vocabulary_size, dim)),
                    "velocities": np.zeros((vocabulary_size, dim))}
        if self.name == "ftrl":
            return {"accumulators": np.full((vocabulary_size, dim),
                                            h.get("initial_accumulator_value", 0.1)),
                    "linears": np.zeros((vocabulary_size, dim))}
        if self.name == "rowwise_adagrad":
            return {"accumulators": np.full((vocabulary_size,),
                                            h.get("initial_accumulator_value", 0.0))}
        return {}

    def update(self, w, slots, row, g, lr):
        """Updates w[row] and the slots' rows for the accumulated gradient g."""
        h = self.hyper
        g = np.clip(g, h.get("clip_gradient_min", -np.inf), h.get("clip_gradient_max", np.inf))
        w0 = w[row].copy()
        if self.name == "sgd":
            w[row] = w[row] - lr * g
        elif self.name == "adagrad":
            a = slots["accumulators"]
            a[row] += g * g
            w[row] = w[row] - lr * g / np.sqrt(a[row])
        elif self.name == "adagrad_momentum":
            a, m = slots["accumulators"], slots["momenta"]
            beta2, momentum = h.get("beta2", 1.0), h.get("momentum", 0.0)
            a[row] = a[row] + g * g if beta2 == 1 else beta2 * a[row] + (1 - beta2) * g * g
            s = (a[row] + h.get("epsilon", 1e-10)) ** (-1.0 / h.get("exponent", 2.0)) * g
            m[row] = momentum * m[row] + s
            step = momentum * m[row] + s if h.get("use_nesterov", False) else m[row]
            w[row] = w[row] - lr * step
        elif self.name == "adam":
            m, v = slots["momenta"], slots["velocities"]
            beta_1, beta_2 = h.get("beta_1", 0.9), h.get("beta_2", 0.999)
            epsilon = h.get("epsilon", 1e-7)
            m[row] = beta_1 * m[row] + (1 - beta_1) * g
            v[row] = beta_2 * v[row] + (1 - beta_2) * g * g
            if h.get("sum_inside_sqrt", True):
                w[row] = w[row] - lr * m[row] / np.sqrt(v[row] + epsilon * epsilon)
            else:
                w[row] = w[row] - lr * m[row] / (np.sqrt(v[row]) + epsilon)
        elif self.name == "ftrl":
            n, z = slots["accumulators"], slots["linears"]
            p = -h.get("learning_rate_power", -0.5)
            l1 = h.get("l1_regularization_strength", 0.0)
            l2 = h.get("l2_regularization_strength", 0.0)
            beta = h.get("beta", 0.0)
            n_new = n[row] + g * g
            z[row] = z[row] + g - (n_new ** p - n[row] ** p) / lr * w[row]
            denominator = (n_new ** p + beta) / lr + 2 * l2
            w[row] = np.where(np.abs(z[row]) <= l1, 0.0,
                              (np.sign(z[row]) * l1 - z[row]) / denominator)
            n[row] = n_new
        elif self.name == "rowwise_adagrad":
            a = slots["accumulators"]
            a[row] += np.mean(g * g)
            w[row] = w[row] - lr * g / (np.sqrt(a[row]) + h.get("epsilon", 1e-8))
        decay = h.get("weight_decay_factor", 0.0)
        if h.get("multiply_weight_decay_factor_by_learning_rate", False):
            decay *= lr
        w[row] = np.clip(w[row] - decay * w0, h.get("clip_weight_min", -np.inf),
                         h.get("clip_weight_max", np.inf))


class Model:
    """Tables (float64) shared by features, trained as recemb does: per table, the touched rows'
    gradient contributions summed over all its features, then one optimizer update per row."""

    def __init__(self, tables, features):
        # tables: {name: (initial values, combiner, Optimizer)}; features: [(table, max_len)].
        self.tables = {name: np.array(values, np.float64) for name, (values, _, _) in
                       tables.items()}
        self.combiners = {name: combiner for name, (_, combiner, _) in tables.items()}
        self.optimizers = {name: optimizer for name, (_, _, optimizer) in tables.items()}
        self.slots = {name: optimizer.slots(*self.tables[name].shape)
                      for name, (_, _, optimizer) in tables.items()}
        self.features = features
        self.step = 0
        self.pending = None

    def lookup(self, inputs):
        """inputs: [(kind, ids, weights)] in feature order; returns the activations."""
        self.pending = []
        outputs = []
        for (table, max_len), (kind, ids, weights) in zip(self.features, inputs):
            feature_slots, shape = slots(kind, ids, weights, max_len)
            self.pending.append(feature_slots)
            outputs.append(lookup(self.tables[table], feature_slots, shape,
                                  self.combiners[table]))
        return outputs

    def apply_gradients(self, gradients):
        for name, table in self.tables.items():
            rows = {}
            for (feature_table, _), feature_slots, gradient in zip(self.features, self.pending,
                                                                   gradients):
                if feature_table == name:
                    accumulate(rows, feature_slots, self.combiners[name], gradient)
            optimizer = self.optimizers[name]
            lr = optimizer.learning_rate(self.step) if callable(optimizer.learning_rate) else (
                optimizer.learning_rate)
            for row in sorted(rows):
                optimizer.update(table, self.slots[name], row, rows[row], lr)
        self.step += 1
