"""Offline datasets: experiences written to and read from JSON files (Ray 0.7
``rllib/offline``), mixed inputs, and off-policy estimators."""
from .input_reader import InputReader, SamplerInput
from .io_context import IOContext
from .json_reader import JsonReader
from .json_writer import JsonWriter
from .mixed_input import MixedInput, ShuffledInput
from .off_policy_estimator import (ImportanceSamplingEstimator, OffPolicyEstimate,
                                   OffPolicyEstimator, WeightedImportanceSamplingEstimator)
from .output_writer import NoopOutput, OutputWriter
from .creators import make_input_creator, make_output_creator

__all__ = ["InputReader", "SamplerInput", "IOContext", "JsonReader", "JsonWriter",
           "MixedInput", "ShuffledInput", "OutputWriter", "NoopOutput", "OffPolicyEstimator",
           "OffPolicyEstimate", "ImportanceSamplingEstimator",
           "WeightedImportanceSamplingEstimator", "make_input_creator", "make_output_creator"]
