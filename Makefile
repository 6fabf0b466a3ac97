# make train: set up, then train PPO on CartPole-v1 until solved.  make test: set up, run all tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup train test test-fast lint format type bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)

train: $(STAMP)
	$(BIN)/rlmod train --algo PPO --env CartPole-v1 --stop-reward 475 --stop-timesteps 500000 --run-dir runs/cartpole-ppo

test: $(STAMP)
	$(BIN)/python -m pytest

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check rlmod tests benchmarks examples
	$(BIN)/ruff format --check rlmod tests benchmarks examples

format: $(STAMP)
	$(BIN)/ruff check --fix rlmod tests benchmarks examples
	$(BIN)/ruff format rlmod tests benchmarks examples

type: $(STAMP)
	$(BIN)/mypy rlmod

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .mypy_cache
