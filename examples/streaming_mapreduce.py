"""The Ray docs' streaming MapReduce: word counts over a stream of articles.

``Mapper`` actors read articles from a stream and count their words;
``Reducer`` actors each own a range of first letters, hold a handle to every
mapper, and add up the mappers' counts for their range, one article index at a
time. The driver asks every reducer for the next result and prints the ten most
frequent words, as the docs' ``streaming.py`` does.

The docs read Wikipedia (``pip install wikipedia``, network access). A batch
job has no network, so here an article is the docstring of a standard-library
module, fetched by its name the way the docs fetch a page by its title:
``importlib.import_module(title).__doc__`` in place of
``wikipedia.page(title).content``. Everything else follows the docs' code.

    python examples/streaming_mapreduce.py --num-mappers 3 --num-reducers 4
    mpiexec -n 3 python -m hpc_ray examples/streaming_mapreduce.py

The docs' loop runs forever; this one stops after ``--articles`` rounds and
checks every round against a plain serial count, ending with ``streaming
mapreduce: N articles x M mappers, K words counted, matches the serial count:
True``.
"""
from __future__ import annotations

import argparse
import heapq
import importlib
import sys
from collections import Counter, defaultdict

import numpy as np

import hpc_ray as ray

#: The stream's titles (the docs' articles.txt lists Wikipedia titles).
TITLES = ["re", "statistics", "csv", "argparse", "json", "pydoc", "unittest", "heapq",
          "doctest", "inspect", "itertools", "subprocess", "ast", "typing", "random",
          "string"]


def fetch_article(title):
    """The article called ``title`` (the docs: ``wikipedia.page(title).content``)."""
    return importlib.import_module(title).__doc__ or ""


class Stream(object):
    def __init__(self, elements):
        self.elements = elements

    def next(self):
        i = 0
        while True:
            yield self.elements[i]
            i = (i + 1) % len(self.elements)


@ray.remote
class Mapper(object):

    def __init__(self, title_stream):
        self.title_stream = title_stream.next()
        self.num_articles_processed = 0
        self.articles = []
        self.word_counts = []

    def get_new_article(self):
        # Get the next article.
        article = fetch_article(next(self.title_stream))
        # Count the words and store the result.
        self.word_counts.append(Counter(article.split(" ")))
        self.num_articles_processed += 1

    def get_range(self, article_index, keys):
        # Process more articles if this Mapper hasn't processed enough yet.
        while self.num_articles_processed < article_index + 1:
            self.get_new_article()
        # Return the word counts from within a given character range.
        return [(k, v) for k, v in self.word_counts[article_index].items()
                if len(k) >= 1 and k[0] >= keys[0] and k[0] <= keys[1]]


@ray.remote
class Reducer(object):

    def __init__(self, keys, *mappers):
        self.mappers = mappers
        self.keys = keys

    def next_reduce_result(self, article_index):
        word_count_sum = defaultdict(lambda: 0)
        # Get the word counts for this Reducer's keys from all of the Mappers
        # and aggregate the results.
        count_ids = [mapper.get_range.remote(article_index, self.keys)
                     for mapper in self.mappers]
        # TODO(rkn): We should process these out of order using ray.wait.
        for count_id in count_ids:
            for k, v in ray.get(count_id):
                word_count_sum[k] += v
        return word_count_sum


def serial_counts(article_index, num_mappers, keys):
    """What the reducers should return together, counted here without actors."""
    article = fetch_article(TITLES[article_index % len(TITLES)])
    counts = Counter(article.split(" "))
    return {k: v * num_mappers for k, v in counts.items()
            if len(k) >= 1 and any(lo <= k[0] <= hi for lo, hi in keys)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-mappers", help="number of mapper actors used", default=3,
                        type=int)
    parser.add_argument("--num-reducers", help="number of reducer actors used", default=4,
                        type=int)
    parser.add_argument("--articles", type=int, default=len(TITLES),
                        help="rounds before stopping (the docs' loop never stops)")
    parser.add_argument("--quick", action="store_true", help="5 rounds, for tests")
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else args.articles

    ray.init()

    # Create one streaming source of articles per mapper.
    streams = []
    for _ in range(args.num_mappers):
        streams.append(Stream(list(TITLES)))

    # Partition the keys among the reducers.
    chunks = np.array_split([chr(i) for i in range(ord("a"), ord("z") + 1)],
                            args.num_reducers)
    keys = [[chunk[0], chunk[-1]] for chunk in chunks]

    # Create a number of mappers.
    mappers = [Mapper.remote(stream) for stream in streams]

    # Create a number of reduces, each responsible for a different range of keys.
    # This gives each Reducer actor a handle to each Mapper actor.
    reducers = [Reducer.remote(key, *mappers) for key in keys]

    article_index = 0
    all_match, words = True, 0
    while article_index < rounds:
        print("article index = {}".format(article_index))
        wordcounts = {}
        counts = ray.get([reducer.next_reduce_result.remote(article_index)
                          for reducer in reducers])
        for count in counts:
            wordcounts.update(count)
        most_frequent_words = heapq.nlargest(10, wordcounts,
                                             key=wordcounts.get)
        for word in most_frequent_words:
            print("  ", word, wordcounts[word])
        all_match &= dict(wordcounts) == serial_counts(article_index, args.num_mappers, keys)
        words += sum(wordcounts.values())
        article_index += 1

    ray.shutdown()
    print(f"streaming mapreduce: {rounds} articles x {args.num_mappers} mappers, "
          f"{words} words counted, matches the serial count: {all_match}")
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
