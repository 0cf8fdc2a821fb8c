"""A typed, timestamped user-movie graph shaped like MovieLens, of any size, deterministic by
(scale, seed): `data=synthetic_movielens`, the recommender stand-in (link prediction, `task=link`).

Two node types and one relation with its reverse (as PyG's `ToUndirected` names it):

    user -rates-> movie, movie -rev_rates-> user

`scale=1.0` has PyG's `MovieLens` (ml-latest-small) sizes: 610 users, 9,742 movies, 100,836
ratings; smaller scales keep ~165 ratings per user. Each rating edge carries `rating` (0.5 .. 5
in halves, float) and `time` (Unix seconds, int64, 1996 .. 2018), the reverse edge the same.

The model, vectorised numpy, one generator drawn in a fixed order:
- every movie has 1 to 3 of `GENRES` genres (skewed: Drama and Comedy most common), and a taste
  vector: its genres' vectors plus noise; every user a taste vector: a few favourite genres'
  vectors plus noise; a pair's affinity is the inner product (scaled to unit spread);
- a user's activity is log-normal (at least `MIN_RATINGS` ratings, as MovieLens keeps users
  with 20 or more); the movies it rates are drawn without repeats by popularity (power law over
  a random ranking) times exp(`TASTE` x affinity): who rates what is learnable from tastes;
- a rating is 3.5 plus its affinity (standardised over the rated pairs) plus noise, clipped to
  0.5 .. 5 and rounded to a half;
- each user is active from a random start for a random span (mean 2 years), its ratings at
  uniform times within: a temporal split (past vs future) differs from a random one;
- movies' features (`num_features`, default 404 as PyG's MovieLens with its 384-wide title
  embeddings): the 20 genre flags, then a noisy random projection of its taste (a title's
  embedding stand-in). Users have no features (PyG's examples give them `torch.eye`; conveyor a
  learned embedding per user);
- labels (so that `task=node` runs too): a movie's first genre; splits 60/15/25% of the movies.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from conveyor.core.errors import ConveyorError
from conveyor.partition.datasets.common import cached
from conveyor.partition.hetero import TypedGraph, typed_graph, with_target

USERS, MOVIES, RATINGS = 610, 9_742, 100_836  # ml-latest-small, PyG's MovieLens
RATES, REV_RATES = ("user", "rates", "movie"), ("movie", "rev_rates", "user")
GENRES, TASTE_DIM, MIN_RATINGS = 20, 16, 5
TASTE, NOISE, RATING_NOISE = 3.0, 0.7, 0.6
FIRST_TIME, LAST_TIME, MEAN_SPAN = 828_000_000, 1_537_000_000, 2 * 365 * 86_400  # 1996-03 .. 2018-09
SPLIT = (0.60, 0.15)  # the movies' train, val; the rest test
VERSION = "synthetic_movielens-v1"  # change whenever the model above changes: old caches are then rebuilt


def sizes(scale: float):
    """(users, movies, ratings) at `scale`: each at least enough for a user's MIN_RATINGS."""
    users, movies = max(round(USERS * scale), 4), max(round(MOVIES * scale), 4 * MIN_RATINGS)
    return users, movies, max(round(RATINGS * scale), users * MIN_RATINGS)


def genre_flags(rng: np.random.Generator, movies: int) -> np.ndarray:
    """[movies, GENRES] 0/1: 1 to 3 genres each, genre g drawn with weight ~ 1 / (g + 1)."""
    weight = 1.0 / (np.arange(GENRES) + 1.0)
    keys = np.log(weight) + rng.gumbel(size=(movies, GENRES))  # Gumbel top-k: draws without repeats
    count = rng.integers(1, 4, size=movies)
    rank = np.argsort(np.argsort(-keys, axis=1), axis=1)
    return (rank < count[:, None]).astype(np.float32)


def activity(rng: np.random.Generator, users: int, movies: int, ratings: int) -> np.ndarray:
    """Each user's rating count: log-normal, at least MIN_RATINGS, at most half the movies,
    summing to about `ratings`."""
    raw = rng.lognormal(0.0, 1.0, size=users)
    counts = np.round(raw / raw.sum() * ratings).astype(np.int64)
    return np.clip(counts, MIN_RATINGS, max(MIN_RATINGS, movies // 2))


def rated_movies(rng, affinity: np.ndarray, counts: np.ndarray) -> tuple:
    """(user, movie) of every rating: each user's movies drawn without repeats by popularity
    times exp(TASTE x affinity) (Gumbel top-k, user by user)."""
    users, movies = affinity.shape
    popularity = -0.8 * np.log(rng.permutation(movies) + 10.0)
    src, dst = [], []
    for user in range(users):
        keys = popularity + TASTE * affinity[user] + rng.gumbel(size=movies)
        chosen = np.sort(np.argpartition(-keys, counts[user] - 1)[:counts[user]])
        src.append(np.full(chosen.size, user))
        dst.append(chosen)
    return np.concatenate(src), np.concatenate(dst)


def star_ratings(rng, affinity: np.ndarray) -> np.ndarray:
    """Each rating (0.5 .. 5 in halves, float32): 3.5 plus its affinity among the rated pairs'
    (standardised: rated pairs are the high-affinity ones) plus noise."""
    spread = (affinity - affinity.mean()) / max(float(affinity.std()), 1e-9)
    stars = 3.5 + spread + RATING_NOISE * rng.standard_normal(affinity.size)
    return np.clip(np.round(stars * 2) / 2, 0.5, 5.0).astype(np.float32)


def rating_times(rng, user: np.ndarray, users: int) -> np.ndarray:
    """Each rating's time: uniform within its user's active span (int64 Unix seconds)."""
    span = np.minimum(rng.exponential(MEAN_SPAN, size=users) + 86_400, LAST_TIME - FIRST_TIME)
    start = FIRST_TIME + rng.random(users) * (LAST_TIME - FIRST_TIME - span)
    return (start[user] + rng.random(user.size) * span[user]).astype(np.int64)


def generate(scale: float = 0.1, seed: int = 0, num_features: int = 404) -> TypedGraph:
    """Build the graph in memory (see `load_synthetic_movielens` for the cached version)."""
    rng = np.random.default_rng(seed)
    users, movies, ratings = sizes(scale)
    flags = genre_flags(rng, movies)
    genre_taste = rng.standard_normal((GENRES, TASTE_DIM))
    movie_taste = flags @ genre_taste / np.sqrt(flags.sum(1, keepdims=True)) + NOISE * rng.standard_normal(
        (movies, TASTE_DIM))
    favourites = genre_flags(rng, users)
    user_taste = favourites @ genre_taste / np.sqrt(favourites.sum(1, keepdims=True)) + NOISE * rng.standard_normal(
        (users, TASTE_DIM))
    affinity = (user_taste @ movie_taste.T).astype(np.float32)  # [users, movies]: 0.8 GB at scale 4
    affinity = (affinity - affinity.mean()) / max(float(affinity.std()), 1e-9)
    user, movie = rated_movies(rng, affinity, activity(rng, users, movies, ratings))
    stars = star_ratings(rng, affinity[user, movie])
    time = rating_times(rng, user, users)
    projection = rng.standard_normal((TASTE_DIM, num_features - GENRES)) / np.sqrt(TASTE_DIM)
    title = movie_taste @ projection + NOISE * rng.standard_normal((movies, num_features - GENRES))
    x = torch.from_numpy(np.concatenate([flags, title.astype(np.float32)], axis=1))
    edges = torch.from_numpy(np.stack([user, movie]))
    attrs = {"rating": torch.from_numpy(stars), "time": torch.from_numpy(time)}
    graph = typed_graph({"user": users, "movie": movies}, {RATES: edges, REV_RATES: edges.flip(0)},
                        x={"movie": x}, edge={(e, k): v for e in (RATES, REV_RATES) for k, v in attrs.items()},
                        name="synthetic_movielens")
    order = rng.permutation(movies)
    cut = np.cumsum([round(movies * f) for f in SPLIT])
    splits = dict(zip(("train", "val", "test"), (torch.from_numpy(np.sort(s)) for s in np.split(order, cut))))
    first_genre = torch.from_numpy(flags.argmax(1))
    return with_target(graph, "movie", first_genre, GENRES, splits)


def load_synthetic_movielens(root: str | Path, scale: float = 0.1, seed: int = 0,
                             num_features: int = 404) -> TypedGraph:
    """The graph for (scale, seed, num_features), generated once into `<root>/synthetic_movielens/`
    and memory-mapped after."""
    scale, seed, num_features = float(scale), int(seed), int(num_features)
    if not 0 < scale <= 4:
        raise ConveyorError(f"synthetic_movielens scale must be in (0, 4], got {scale}; 1.0 is MovieLens-sized "
                            f"(ml-latest-small: 610 users, 9,742 movies, 100,836 ratings).")
    if num_features < GENRES + 1:
        raise ConveyorError(f"synthetic_movielens needs num_features >= {GENRES + 1} (its {GENRES} genre flags and "
                            f"at least one title column), got {num_features}.")
    name = f"scale{scale}_seed{seed}" + ("" if num_features == 404 else f"_f{num_features}")
    return cached(Path(root) / "synthetic_movielens" / name, lambda: generate(scale, seed, num_features),
                  stamp=VERSION)
