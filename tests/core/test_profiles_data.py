"""Model profiles as data (``contextkit/core/profiles.json``), user files, and the cached-prefix predictor."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from importlib.resources import files

import numpy as np
import pytest

from contextkit import CacheRule, ModelProfile, ProfileError, get_profile, list_profiles, load_profiles
from contextkit.core import profiles
from contextkit.core.prompt_cache import cached_prefix_tokens, common_prefix

SHIPPED = json.loads(files("contextkit.core").joinpath("profiles.json").read_text(encoding="utf-8"))

#: The profiles shipped before the data file, with the values other code and tests rely on:
#: (window, reserve, tokenizer, exact, input price).
BEFORE = {
    "gpt-4o": (128_000, 16_384, "o200k_base", True, 2.50),
    "gpt-4o-mini": (128_000, 16_384, "o200k_base", True, 0.15),
    "gpt-4-turbo": (128_000, 4_096, "cl100k_base", True, 10.00),
    "gpt-4.1": (1_047_576, 32_768, "o200k_base", True, 2.00),
    "gpt-4.1-mini": (1_047_576, 32_768, "o200k_base", True, 0.40),
    "claude-sonnet-4": (200_000, 16_000, "o200k_base", False, 3.00),
    "claude-sonnet-4-1m": (1_000_000, 32_000, "o200k_base", False, 6.00),
    "claude-haiku-3.5": (200_000, 8_192, "o200k_base", False, 0.80),
    "gemini-2.5-pro": (1_048_576, 65_536, "o200k_base", False, 2.50),
    "gemini-1.5-pro": (2_097_152, 8_192, "o200k_base", False, 2.50),
    "llama-3.1-8b-instruct": (131_072, 4_096, "cl100k_base", False, None),
}

OPENAI = CacheRule(kind="prefix", min_tokens=1024, step=128)
ANTHROPIC = CacheRule(kind="breakpoints", min_tokens=1024, max_breakpoints=4)
GEMINI = CacheRule(kind="implicit", min_tokens=2048)


@pytest.fixture
def forget_added():
    """Names a test adds to the registry, removed afterwards (the registry is process-wide)."""
    added: list[str] = []
    yield added
    for name in added:
        profiles._PROFILES.pop(name, None)


def _run(code: str, env_path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONTEXTKIT_PROFILES": env_path}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


class TestShippedProfiles:
    def test_every_shipped_profile_validates_and_is_registered(self):
        names = [entry["name"] for entry in SHIPPED["profiles"]]
        assert len(names) == len(set(names))
        for entry in SHIPPED["profiles"]:
            profile = ModelProfile.model_validate(entry)
            assert get_profile(profile.name) == profile
            assert profile.prompt_budget > 0

    def test_prices_checked_on_a_recorded_date(self):
        assert SHIPPED["checked"] == "2026-12-03" and SHIPPED["sources"]
        for entry in SHIPPED["profiles"]:
            if entry.get("output_price_per_million") is not None or entry.get("cached_input_price_per_million"):
                assert "2026-12-03" in entry["source"] and "https://" in entry["source"], entry["name"]

    @pytest.mark.parametrize("name", sorted(BEFORE))
    def test_the_profiles_shipped_before_keep_their_values(self, name):
        p = get_profile(name)
        assert (p.context_window, p.reserved_output, p.tokenizer, p.exact_tokenizer,
                p.input_price_per_million) == BEFORE[name]
        assert p.safety_margin == (0.0 if p.exact_tokenizer else 0.1)

    @pytest.mark.parametrize("name", ["gpt-5", "gpt-5-mini", "gpt-5-nano", "claude-opus-4-5", "claude-sonnet-4-5",
                                      "claude-haiku-4-5", "gemini-2.5-flash", "gemini-3-pro"])
    def test_current_models_resolve(self, name):
        p = get_profile(name)
        assert p.name == name and p.cache is not None and p.cache.source.startswith("https://")
        if name.startswith("gpt-"):
            assert p.tokenizer == "o200k_base" and p.exact_tokenizer
        else:
            assert not p.exact_tokenizer and p.safety_margin == 0.1

    def test_cache_rules_follow_each_provider(self):
        assert get_profile("gpt-5").cache.model_dump(exclude={"source", "lifetime_s"}) == {
            "kind": "prefix", "min_tokens": 1024, "step": 128, "max_breakpoints": None}
        assert get_profile("gpt-4-turbo").cache is None  # OpenAI caches gpt-4o and newer
        assert get_profile("claude-sonnet-4-5").cache.min_tokens == 1024
        assert get_profile("claude-haiku-3.5").cache.min_tokens == 2048
        assert get_profile("claude-opus-4-5").cache.min_tokens == 4096
        assert get_profile("claude-opus-4-5").cache.max_breakpoints == 4
        assert get_profile("gemini-3-pro").cache.kind == "implicit"

    def test_confirmed_prices(self):
        opus = get_profile("claude-opus-4-5")
        assert (opus.input_price_per_million, opus.output_price_per_million, opus.cached_input_price_per_million,
                opus.cache_write_price_per_million) == (5.0, 25.0, 0.5, 6.25)
        nano = get_profile("gpt-5-nano")
        assert (nano.input_price_per_million, nano.cached_input_price_per_million) == (0.05, 0.005)
        assert get_profile("gemini-3-pro").input_price_per_million is None  # not confirmed: unknown, never 0

    def test_the_name_users_type_and_the_api_id(self):
        assert "gemini-3-pro-preview" in get_profile("gemini-3-pro").description
        from contextkit.llm._calls import forget_profiles, profile_for

        forget_profiles()
        assert profile_for("gemini-3-pro-preview").name == "gemini-3-pro"
        assert profile_for("gpt-5-mini-2025-08-07").name == "gpt-5-mini"
        assert profile_for("claude-opus-4-5-20251101").name == "claude-opus-4-5"


class TestUserFiles:
    def test_a_json_file_adds_profiles(self, tmp_path, forget_added):
        path = tmp_path / "mine.json"
        path.write_text(json.dumps({"profiles": [
            {"name": "test-json-model", "context_window": 32_768, "reserved_output": 2_048,
             "input_price_per_million": 1.0, "cache": {"kind": "prefix", "min_tokens": 512, "step": 64}}]}))
        forget_added.append("test-json-model")
        [loaded] = load_profiles(path)
        assert get_profile("test-json-model") is loaded
        assert loaded.cache.step == 64 and loaded.prompt_budget == 30_720
        assert "test-json-model" in {p.name for p in list_profiles()}

    def test_a_toml_file_adds_profiles(self, tmp_path, forget_added):
        path = tmp_path / "mine.toml"
        path.write_text('[[profiles]]\nname = "test-toml-model"\ncontext_window = 8192\nreserved_output = 1024\n'
                        'exact_tokenizer = false\nsafety_margin = 0.1\n\n[profiles.cache]\nkind = "breakpoints"\n'
                        'min_tokens = 1024\nmax_breakpoints = 4\n')
        forget_added.append("test-toml-model")
        [loaded] = load_profiles(str(path))
        assert get_profile("test-toml-model").cache.kind == "breakpoints" and not loaded.exact_tokenizer

    def test_a_known_name_needs_replace(self, tmp_path, forget_added):
        path = tmp_path / "again.json"
        path.write_text(json.dumps({"profiles": [{"name": "test-again", "context_window": 100,
                                                  "reserved_output": 10}]}))
        forget_added.append("test-again")
        load_profiles(path)
        with pytest.raises(ProfileError, match=r"again\.json.*'test-again' exists.*replace=True"):
            load_profiles(path)
        path.write_text(json.dumps({"profiles": [{"name": "test-again", "context_window": 200,
                                                  "reserved_output": 10}]}))
        load_profiles(path, replace=True)
        assert get_profile("test-again").context_window == 200

    @pytest.mark.parametrize("profile, field", [
        ({"name": "test-bad", "context_window": 100, "reserved_output": 10, "input_price_per_milion": 1.0},
         "input_price_per_milion"),
        ({"name": "test-bad", "context_window": "big", "reserved_output": 10}, "context_window"),
        ({"name": "test-bad", "context_window": 100, "reserved_output": 10,
          "cache": {"kind": "prefix", "min_tokens": 0}}, "cache.min_tokens"),
        ({"name": "test-bad", "context_window": 100, "reserved_output": 10,
          "cache": {"kind": "lru", "min_tokens": 10}}, "cache.kind"),
    ])
    def test_a_bad_profile_is_refused_naming_file_profile_and_field(self, tmp_path, profile, field):
        path = tmp_path / "bad.json"
        good = {"name": "test-good-before-bad", "context_window": 100, "reserved_output": 10}
        path.write_text(json.dumps({"profiles": [good, profile]}))
        with pytest.raises(ProfileError) as caught:
            load_profiles(path)
        message = str(caught.value)
        assert str(path) in message and "'test-bad'" in message and field in message
        assert "pydantic" not in message and "Traceback" not in message
        with pytest.raises(ProfileError):  # all or nothing: the good profile was not added either
            get_profile("test-good-before-bad")

    @pytest.mark.parametrize("name, text, expected", [
        ("broken.json", "{not json", "not valid JSON"),
        ("broken.toml", "profiles = [", "not valid TOML"),
        ("shape.json", json.dumps({"profile": []}), "under the key 'profiles'"),
        ("twice.json", json.dumps({"profiles": [{"name": "t", "context_window": 9, "reserved_output": 1}] * 2}),
         "declared twice"),
        ("entry.json", json.dumps({"profiles": ["gpt-4o"]}), "profile #1: expected a table"),
    ])
    def test_a_bad_file_is_refused_naming_it(self, tmp_path, name, text, expected):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ProfileError, match=expected) as caught:
            load_profiles(path)
        assert str(path) in str(caught.value)

    def test_a_missing_file(self, tmp_path):
        with pytest.raises(ProfileError, match="cannot read"):
            load_profiles(tmp_path / "absent.json")

    def test_the_environment_variable_names_a_file_read_on_first_use(self, tmp_path):
        path = tmp_path / "env.json"
        path.write_text(json.dumps({"profiles": [
            {"name": "test-env-model", "context_window": 4096, "reserved_output": 512},
            {"name": "gpt-4o", "context_window": 128_000, "reserved_output": 16_384, "tokenizer": "o200k_base",
             "input_price_per_million": 9.0}]}))
        code = ("from contextkit import get_profile; "
                "print(get_profile('test-env-model').context_window, get_profile('gpt-4o').input_price_per_million)")
        out = _run(code, str(path))
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["4096", "9.0"]  # its profiles replace shipped ones of the same name

    def test_a_bad_environment_file_names_the_variable(self, tmp_path):
        path = tmp_path / "env.json"
        path.write_text(json.dumps({"profiles": [{"name": "x", "context_window": 10, "reserved_output": 10}]}))
        code = ("from contextkit import ProfileError, get_profile\n"
                "try:\n    get_profile('gpt-4o')\nexcept ProfileError as exc:\n    print(exc)\n")
        out = _run(code, str(path))
        assert out.returncode == 0, out.stderr
        assert "CONTEXTKIT_PROFILES" in out.stdout and str(path) in out.stdout and "no room" in out.stdout


class TestCachedPrefixTokens:
    @staticmethod
    def _pair(shared: int, total: int = 6_000):
        previous = list(range(total))
        current = previous[:shared] + [-1] * (total - shared)
        return previous, current

    @pytest.mark.parametrize("shared, expected", [(0, 0), (1_023, 0), (1_024, 1_024), (1_151, 1_024),
                                                  (1_152, 1_152), (1_300, 1_280), (6_000, 5_888)])
    def test_openai_counts_whole_steps_of_128_from_1024(self, shared, expected):
        assert cached_prefix_tokens(*self._pair(shared), OPENAI) == expected

    def test_a_cold_cache_serves_nothing(self):
        assert cached_prefix_tokens(None, list(range(5_000)), OPENAI) == 0
        assert cached_prefix_tokens(None, list(range(5_000)), GEMINI) == 0

    def test_anthropic_serves_up_to_the_last_shared_breakpoint(self):
        previous, current = self._pair(4_000)
        assert cached_prefix_tokens(previous, current, ANTHROPIC, breakpoints=[900, 2_000, 5_000]) == 2_000
        assert cached_prefix_tokens(previous, current, ANTHROPIC, breakpoints=[5_000, 900, 3_999]) == 3_999
        assert cached_prefix_tokens(previous, current, ANTHROPIC, breakpoints=[900]) == 0  # below the minimum
        assert cached_prefix_tokens(previous, current, ANTHROPIC) == 0  # no breakpoint, nothing cached

    def test_anthropic_counts_only_the_last_breakpoints(self):
        previous, current = self._pair(6_000)
        two = ANTHROPIC.model_copy(update={"max_breakpoints": 2})
        # The last two are 5,500 and 5,900: the earlier 2,000 is not a breakpoint the provider sees.
        assert cached_prefix_tokens(previous, current, two, breakpoints=[2_000, 5_500, 5_900]) == 5_900
        assert cached_prefix_tokens(*self._pair(3_000), two, breakpoints=[2_000, 5_500, 5_900]) == 0

    @pytest.mark.parametrize("shared, expected", [(2_047, 0), (2_048, 2_048), (3_333, 3_333)])
    def test_gemini_serves_the_whole_shared_prefix_past_its_minimum(self, shared, expected):
        assert cached_prefix_tokens(*self._pair(shared), GEMINI) == expected

    def test_with_a_shipped_rule(self):
        previous, current = self._pair(1_300)
        assert cached_prefix_tokens(previous, current, get_profile("gpt-4.1").cache) == 1_280


class TestCommonPrefix:
    def test_agrees_with_a_naive_loop(self):
        rng = random.Random(7)

        def naive(a, b):
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            return n

        for _ in range(200):
            length = rng.choice([0, 1, 5, 4095, 4096, 4097, 10_000, 30_000])
            a = [rng.randrange(200_000) for _ in range(length)]
            cut = rng.randint(0, length)
            b = a[:cut] + [rng.randrange(3) for _ in range(rng.randint(0, 50))]
            expected = naive(a, b)
            assert common_prefix(a, b) == expected
            assert common_prefix(tuple(a), b) == expected
            assert common_prefix(np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)) == expected
            assert common_prefix(np.array(a, dtype=np.int64), b) == expected

    def test_long_requests(self):
        a = list(range(300_000))
        b = a[:250_001] + [-1]
        assert common_prefix(a, b) == 250_001
        assert common_prefix(a, a) == 300_000
