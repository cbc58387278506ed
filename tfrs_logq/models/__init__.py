"""Retrieval models built on LogQRetrieval: SASRec and a two-tower model."""

from tfrs_logq.models._model import Model
from tfrs_logq.models._model import apply_gradients
from tfrs_logq.models.objective import LOSSES
from tfrs_logq.models.objective import NEGATIVES
from tfrs_logq.models.objective import RetrievalObjective
from tfrs_logq.models.objective import make_objective
from tfrs_logq.models.sasrec import SASRec
from tfrs_logq.models.two_tower import TwoTower

__all__ = [
    "LOSSES",
    "Model",
    "NEGATIVES",
    "RetrievalObjective",
    "SASRec",
    "TwoTower",
    "apply_gradients",
    "make_objective",
]
