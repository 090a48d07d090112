"""Which test files are unit tests: the ones the test command also runs on every other Python.

`scripts/test.sh` runs every test on the main Python (3.11), and `pytest -m unit` on 3.12 and
3.13. A unit test here is a file that exercises mrtr in-process or with its own subprocesses,
needs nothing but mrtr's `dev` extra (no peers, Node, Redis, HAProxy, docs tooling or the
official SDK) and is fast; the integration tests (interop, scale-out, benchmarks, deploy,
docs, packaging) run once. `tests/conftest.py` marks these files `unit`, and fails the run when
a name listed here has no file, so that a rename cannot drop a file silently.
"""

from __future__ import annotations

UNIT = frozenset(
    {
        "test_bad_input.py",
        "test_bad_request_ids.py",
        "test_cancelled_round_http.py",
        "test_cli_display.py",
        "test_client_auth.py",
        "test_client_auth_binding.py",
        "test_client_auth_discovery.py",
        "test_client_bounds.py",
        "test_client_fast_path.py",
        "test_client_hardening.py",
        "test_client_listen.py",
        "test_connection_bound.py",
        "test_deadline.py",
        "test_deep_arguments.py",
        "test_engine_fast_path.py",
        "test_engine_layer.py",
        "test_era.py",
        "test_era_classify.py",
        "test_flow_every_transport.py",
        "test_flow_fast_path.py",
        "test_http_fast_path.py",
        "test_http_transport.py",
        "test_input_builders.py",
        "test_install_keeps_entries.py",
        "test_key_rotation.py",
        "test_legacy_client.py",
        "test_legacy_http.py",
        "test_legacy_server.py",
        "test_lifecycle.py",
        "test_mrtr_client.py",
        "test_mrtr_server.py",
        "test_once_journal.py",
        "test_proxy_cli.py",
        "test_proxy_properties.py",
        "test_proxy_relay_notes.py",
        "test_questions_as_coroutines.py",
        "test_redemption.py",
        "test_replay_engine.py",
        "test_replay_property.py",
        "test_request_flow.py",
        "test_request_state.py",
        "test_request_state_hardening.py",
        "test_run_loop.py",
        "test_sealing_golden.py",
        "test_server_api.py",
        "test_server_auth.py",
        "test_server_auth_dpop.py",
        "test_store_expiry.py",
        "test_tasks_client.py",
        "test_tasks_redemption.py",
        "test_tasks_server.py",
        "test_tasks_server_app.py",
        "test_test_imports.py",
        "test_tool_direct_path.py",
        "test_tool_results.py",
        "test_uri_template.py",
        "test_uri_template_linear.py",
    }
)
