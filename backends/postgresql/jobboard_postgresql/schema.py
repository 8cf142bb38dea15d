"""The tables of a ``postgresql://`` board schema, and how they are installed.

One schema (URL option ``schema``, default ``jobboard``) holds every board of a database; rows carry
their board's name. Tables:

- ``session``: one row per open board (its dedicated connection holds a session advisory lock on
  ``(ns, id)``; the row's ``idle_since`` says it waits for work, for the wake-one rule);
- ``job``: the board, small and hot (state 0 ready, 1 claimed, 2 waiting for dependencies, 3
  delayed, 9 malformed and set aside), with its own autovacuum settings and partial indexes per state;
- ``dep`` and ``result``: links to dependents and the results delivered to them;
- ``trash``, ``kept`` (consume results kept for ``wait_for_completion``), ``key`` (idempotency keys and
  the job they found when it was settled), ``done`` (settles' evidence, for a retried settle whose
  reply was lost), ``entity`` (dies with its session), ``event`` (UNLOGGED: a hint for ``events()``),
  ``observed`` (until when a board's events are read: a bulk post writes its events only before then),
  ``retried`` (the nonces of calls retried in the last hour: a first attempt arriving after its retry
  does nothing, :func:`~jobboard_postgresql.functions` ``jb.fence``);
- flow control's ``flow``, ``flow_limit``, ``flow_pause``, ``flow_grant`` and ``job.grp``
  (:mod:`jobboard_postgresql.flow_sql`).

Installed at open, once per schema version, under a transaction-level advisory lock so that boards
opening together do not race; the functions are in :mod:`jobboard_postgresql.functions`.
"""

from __future__ import annotations

from jobboard_postgresql.flow_sql import FLOW_FUNCTIONS, FLOW_TABLES
from jobboard_postgresql.functions import FUNCTIONS
from jobboard_postgresql.settles import SETTLES

VERSION = 20
"""14: before flow control; 15: flow control's first build (rate grants at the statement's start, a gates
recount that could miss a concurrent pause); 16: flow control (:mod:`~jobboard_postgresql.flow_sql`:
``job.grp``, ``trash.grp`` and the ``flow*`` tables, added to a version 14 or 15 schema by its first open
at version 16; its functions are always replaced); 17: ``observed`` (``post_plain`` writes its ``posted``
events only while a board of the same name reads events; created by an older schema's first open at 17); 18:
``post_head`` (a plain ``post_many`` batch written by ``COPY``, :mod:`jobboard_postgresql.bulk`; no table
changes: an older schema's first open at 18 replaces the functions); 19: ``retried`` and the calls' fence
(``jb.fence``: each call's transaction first takes the advisory lock of its nonce or token, a retry waits
there for its first attempt; ``post_head`` takes the batch's first token; created by an older schema's first
open at 19); 20: ``r_held`` in the rows of ``claim_next``, ``consume_next``, ``cycle`` and ``flow_next`` (why the
jobs a gated claim passed over were held back: ``JobBoard.held_back``; no table changes)."""

TABLES = """
CREATE SCHEMA IF NOT EXISTS @SCHEMA@;
CREATE TABLE IF NOT EXISTS jb.meta (version int NOT NULL);
CREATE SEQUENCE IF NOT EXISTS jb.job_id AS bigint;
CREATE TABLE IF NOT EXISTS jb.session (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  board text NOT NULL,
  pid int NOT NULL DEFAULT pg_backend_pid(),
  idle_since timestamptz,
  started_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS session_idle ON jb.session (board, idle_since) WHERE idle_since IS NOT NULL;
CREATE TABLE IF NOT EXISTS jb.job (
  id bigint PRIMARY KEY,
  board text NOT NULL,
  name text NOT NULL,
  rank smallint NOT NULL,
  state smallint NOT NULL,
  gen bigint NOT NULL DEFAULT 0,
  attempts int NOT NULL DEFAULT 0,
  max_attempts int,
  not_before float8,
  session bigint,
  owner text,
  nonce uuid,
  pending int NOT NULL DEFAULT 0,
  key text,
  token uuid,
  keep_result boolean NOT NULL DEFAULT false,
  result_ttl float8,
  trash_ttl float8,
  posting bytea NOT NULL,
  last_error bytea,
  progress bytea,
  parents boolean NOT NULL DEFAULT false,
  children boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 1, autovacuum_analyze_scale_factor = 0.05);
CREATE INDEX IF NOT EXISTS job_ready ON jb.job (board, rank, id) WHERE state = 0;
CREATE INDEX IF NOT EXISTS job_order ON jb.job (board, rank, id);
CREATE INDEX IF NOT EXISTS job_delayed ON jb.job (board, not_before) WHERE state = 3;
CREATE INDEX IF NOT EXISTS job_claimed ON jb.job (session) WHERE state = 1;
CREATE TABLE IF NOT EXISTS jb.dep (parent bigint NOT NULL, child bigint NOT NULL, PRIMARY KEY (parent, child));
CREATE TABLE IF NOT EXISTS jb.result (child bigint NOT NULL, parent bigint NOT NULL, body bytea NOT NULL,
  PRIMARY KEY (child, parent));
CREATE TABLE IF NOT EXISTS jb.trash (
  id bigint PRIMARY KEY, board text NOT NULL, name text NOT NULL, rank smallint NOT NULL,
  attempts int NOT NULL, not_before float8, pending int NOT NULL, key text, token uuid,
  trash_ttl float8, posting bytea NOT NULL, last_error bytea, reason text NOT NULL, trashed_at float8 NOT NULL,
  max_attempts int, keep_result boolean NOT NULL, result_ttl float8, gen bigint NOT NULL,
  parents boolean NOT NULL DEFAULT false);
CREATE INDEX IF NOT EXISTS trash_board ON jb.trash (board, trashed_at);
CREATE TABLE IF NOT EXISTS jb.kept (id bigint PRIMARY KEY, board text NOT NULL, result bytea NOT NULL,
  at float8 NOT NULL, ttl float8);
CREATE INDEX IF NOT EXISTS kept_board ON jb.kept (board, at);
CREATE TABLE IF NOT EXISTS jb.key (
  board text NOT NULL, key text NOT NULL, job_id bigint NOT NULL,
  settled_at float8, posting bytea, attempts int, not_before float8, last_error bytea,
  PRIMARY KEY (board, key));
CREATE INDEX IF NOT EXISTS key_settled ON jb.key (board, settled_at) WHERE settled_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS jb.done (id bigint NOT NULL, gen bigint NOT NULL, action "char" NOT NULL,
  at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (id, gen))
  WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000);
CREATE INDEX IF NOT EXISTS done_at ON jb.done (at);
CREATE TABLE IF NOT EXISTS jb.entity (
  board text NOT NULL, name text NOT NULL,
  session bigint NOT NULL REFERENCES jb.session (id) ON DELETE CASCADE,
  metadata bytea NOT NULL, PRIMARY KEY (board, name));
CREATE INDEX IF NOT EXISTS entity_session ON jb.entity (session);
CREATE UNLOGGED TABLE IF NOT EXISTS jb.event (
  id bigint GENERATED ALWAYS AS IDENTITY, board text NOT NULL,
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(), kind text NOT NULL, job bigint, detail text NOT NULL,
  at timestamptz NOT NULL DEFAULT now())
  WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000);
CREATE INDEX IF NOT EXISTS event_board ON jb.event (board, xid);
CREATE TABLE IF NOT EXISTS jb.observed (board text PRIMARY KEY, until float8 NOT NULL);
CREATE TABLE IF NOT EXISTS jb.retried (nonce uuid PRIMARY KEY, at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS retried_at ON jb.retried (at);
"""


def render(sql: str, schema: str) -> str:
    """``sql`` with its ``jb.`` placeholders naming ``schema`` (a checked identifier), and ``@CHANNEL@``
    (the prefix of the sessions' notification channels) replaced."""
    return sql.replace("@SCHEMA@", f'"{schema}"').replace("jb.", f'"{schema}".').replace("@CHANNEL@", schema)


DROP_FUNCTIONS = """
DO $$ DECLARE f record; BEGIN
  FOR f IN SELECT p.oid::regprocedure AS signature FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           WHERE n.nspname = '@CHANNEL@' LOOP
    EXECUTE 'DROP FUNCTION ' || f.signature;
  END LOOP;
END $$;
"""
"""An older version's functions go first (``CREATE OR REPLACE`` cannot change a function's result type)."""


def ddl(schema: str) -> str:
    """Everything to create or update the schema, as one script (run under the schema's install lock)."""
    functions = render(FUNCTIONS, schema) + render(SETTLES, schema) + render(FLOW_FUNCTIONS, schema)
    return render(TABLES + FLOW_TABLES, schema) + render(DROP_FUNCTIONS, schema) + functions + (
        f'DELETE FROM "{schema}".meta; INSERT INTO "{schema}".meta VALUES ({VERSION});')
