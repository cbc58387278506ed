"""The paper campaign: the reproduction of Khrylchenko et al. 2025's Table 1 through
`pipelines.train` (`python -m paper.reproduce`), its queue on two CPU cores
(`paper/campaign.sh`) and its reports (docs/results/). Not part of the installed library: it
runs from the repository's root. See paper/README.md."""
