"""Flow control's tables and PL/pgSQL functions (issue 27; the rules: :mod:`jobboard.board.limits`).

- ``flow``: one row per board with a limit or a pause ever set: ``paused`` (the whole board) and
  ``gates`` (its limits + paused names + the board's pause). A claim reads it first (one primary-key
  lookup): while ``gates`` is 0 it runs the plain claim, nothing else.
- ``flow_limit`` (a group's limit), ``flow_pause`` (paused names), ``flow_grant`` (a rated group's last
  ``count`` grants, numbered, with their times on the server's clock: a sliding window log; kept when a
  limit is cleared or changed). The check is two seeks whatever the count: the last grant (``n``) and
  the grant ``n - count + 1``, held back while that one is less than ``period`` old.
- ``job.grp`` and ``trash.grp``: a job's group (a requeued job keeps it and its place: its id).

**One atomic step.** A claim of a job of a limited group takes the group's transaction advisory lock
(``jb.group_key``: a hash of schema, board and group; no row written), then counts and claims in the
same transaction: claimers of one group are serialized by it (under READ COMMITTED each statement after
the lock sees every claim committed before it). ``claim_next`` and ``cycle`` only try it: a claimer
that meets a group another is claiming moves on to other work (a busy group is skipped for that call);
``claim(job)`` waits for it. **A permit is a claim**:
``running`` is the group's rows in state 1, so a permit returns with the write that ends the claim
(a settle, a cancel, the reaper's release of a dead session's claims: the moment the job is claimable
again). A write that returns a permit or changes a limit or pause wakes waiting sessions.
"""

from __future__ import annotations

FLOW_TABLES = """
ALTER TABLE jb.job ADD COLUMN IF NOT EXISTS grp text;
ALTER TABLE jb.trash ADD COLUMN IF NOT EXISTS grp text;
CREATE INDEX IF NOT EXISTS job_grp ON jb.job (board, grp, state, id) WHERE grp IS NOT NULL;
CREATE TABLE IF NOT EXISTS jb.flow (board text PRIMARY KEY, paused boolean NOT NULL DEFAULT false,
  gates int NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS jb.flow_limit (board text NOT NULL, grp text NOT NULL, concurrency int,
  sequence boolean NOT NULL DEFAULT false, rate_count int, rate_period float8, PRIMARY KEY (board, grp));
CREATE TABLE IF NOT EXISTS jb.flow_pause (board text NOT NULL, name text NOT NULL, PRIMARY KEY (board, name));
DO $$ BEGIN  -- an early version 15 build logged grant times without numbers: that log goes (windows refill)
  IF to_regclass('jb.flow_grant') IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute a
     WHERE a.attrelid = to_regclass('jb.flow_grant') AND a.attname = 'n' AND NOT a.attisdropped) THEN
    DROP TABLE jb.flow_grant;
  END IF;
END $$;
CREATE TABLE IF NOT EXISTS jb.flow_grant (board text NOT NULL, grp text NOT NULL, n bigint NOT NULL,
  at float8 NOT NULL, PRIMARY KEY (board, grp, n));
"""
"""Flow control's tables (schema version 16; a version 14 schema gains them at the first open of this version,
and an early version 15 one, of this session's first build, its numbered grant log)."""

FLOW_FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION jb.group_key(p_board text, p_grp text) RETURNS bigint LANGUAGE sql IMMUTABLE AS
$$ SELECT hashtextextended('@CHANNEL@' || chr(1) || p_board || chr(1) || p_grp, 27) $$;

CREATE OR REPLACE FUNCTION jb.gated(p_board text) RETURNS boolean LANGUAGE plpgsql STABLE AS $$
BEGIN  -- plpgsql, not sql: a sql function with a sub-select is not inlined and is planned at every call
  RETURN coalesce((SELECT f.gates > 0 FROM jb.flow f WHERE f.board = p_board), false);
END $$;

CREATE OR REPLACE FUNCTION jb.permit_back(p_board text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN  -- a grouped job's claim ended or the job left: on a gated board, an idle session is woken (wake-one)
  IF EXISTS (SELECT 1 FROM jb.flow f WHERE f.board = p_board AND f.gates > 0)
     AND EXISTS (SELECT 1 FROM jb.session s WHERE s.board = p_board AND s.idle_since IS NOT NULL) THEN
    PERFORM jb.wake(p_board);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.flow_changed(p_board text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE s record;
BEGIN  -- recount the board's gates; every idle session of the board is woken (what it waits for may be free).
  -- The recount is a statement after the row lock: under READ COMMITTED it sees every change committed by
  -- the writer that held the lock before (an UPDATE waiting for the row would recount from its own start)
  INSERT INTO jb.flow (board) VALUES (p_board) ON CONFLICT (board) DO NOTHING;
  PERFORM 1 FROM jb.flow f WHERE f.board = p_board FOR UPDATE;  -- the recount below comes after every other
  UPDATE jb.flow f SET gates = (SELECT count(*) FROM jb.flow_limit l WHERE l.board = p_board)
                              + (SELECT count(*) FROM jb.flow_pause p WHERE p.board = p_board) + f.paused::int
   WHERE f.board = p_board;
  FOR s IN UPDATE jb.session x SET idle_since = NULL WHERE x.board = p_board AND x.idle_since IS NOT NULL
           RETURNING x.id LOOP
    PERFORM pg_notify('@CHANNEL@_' || s.id, 'w');
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.set_limit(p_board text, p_grp text, p_concurrency int, p_sequence boolean,
  p_count int, p_period float8) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO jb.flow_limit (board, grp, concurrency, sequence, rate_count, rate_period)
  VALUES (p_board, p_grp, p_concurrency, p_sequence, p_count, p_period)
  ON CONFLICT (board, grp) DO UPDATE SET concurrency = EXCLUDED.concurrency, sequence = EXCLUDED.sequence,
    rate_count = EXCLUDED.rate_count, rate_period = EXCLUDED.rate_period;
  PERFORM jb.flow_changed(p_board);
END $$;

CREATE OR REPLACE FUNCTION jb.clear_limit(p_board text, p_grp text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v boolean;
BEGIN
  DELETE FROM jb.flow_limit WHERE board = p_board AND grp = p_grp;
  v := FOUND;
  PERFORM jb.flow_changed(p_board);
  RETURN v;
END $$;

CREATE OR REPLACE FUNCTION jb.pause(p_board text, p_name text, p_on boolean) RETURNS void LANGUAGE plpgsql AS $$
BEGIN  -- p_name NULL: the whole board
  IF p_name IS NULL THEN
    INSERT INTO jb.flow (board, paused) VALUES (p_board, p_on) ON CONFLICT (board) DO UPDATE SET paused = p_on;
  ELSIF p_on THEN
    INSERT INTO jb.flow_pause (board, name) VALUES (p_board, p_name) ON CONFLICT DO NOTHING;
  ELSE
    DELETE FROM jb.flow_pause WHERE board = p_board AND name = p_name;
  END IF;
  PERFORM jb.flow_changed(p_board);
END $$;

CREATE OR REPLACE FUNCTION jb.flow_check(p_board text, l jb.flow_limit, p_id bigint,
  OUT o_why text, OUT o_due float8, OUT o_head bigint, OUT o_at float8, OUT o_n bigint)
LANGUAGE plpgsql AS $$
-- why group l.grp holds job p_id back now (NULL: it does not; p_id NULL: any job but a sequence's head),
-- o_due the seconds until its next rate permit, o_head the one job a sequence group may run, o_at the time
-- a grant now is recorded at: the server's clock now (under the group's lock, after any wait for a row),
-- or the group's last grant if later (grants are serialized by the group's lock, so the log is in order
-- and the window checked is the one ending at o_at), o_n its number
DECLARE v_n int; v0 bigint; v1 bigint; v2 bigint; v3 bigint;
BEGIN
  IF l.concurrency IS NOT NULL THEN
    SELECT count(*) INTO v_n FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 1;
    IF v_n >= l.concurrency THEN o_why := 'concurrency'; RETURN; END IF;
  END IF;
  IF l.sequence THEN  -- each a seek in job_grp: the group's first job in each live state
    SELECT (SELECT min(j.id) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 0),
           (SELECT min(j.id) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 1),
           (SELECT min(j.id) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 2),
           (SELECT min(j.id) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 3)
      INTO v0, v1, v2, v3;
    o_head := least(v0, v2, v3);
    IF v1 IS NOT NULL OR o_head = v2 OR (o_head = v3 AND NOT EXISTS (
         SELECT 1 FROM jb.job j WHERE j.id = v3 AND j.not_before <= jb.now())) OR o_head <> p_id THEN
      o_why := 'sequence'; RETURN;
    END IF;
  END IF;
  IF l.rate_count IS NOT NULL THEN
    SELECT g.n, g.at INTO o_n, o_at FROM jb.flow_grant g WHERE g.board = p_board AND g.grp = l.grp
     ORDER BY g.n DESC LIMIT 1;
    o_at := greatest(jb.now(), o_at);
    SELECT g.at INTO o_due FROM jb.flow_grant g WHERE g.board = p_board AND g.grp = l.grp
       AND g.n = o_n - l.rate_count + 1;  -- the oldest of the last count grants
    o_n := coalesce(o_n, 0) + 1;
    IF o_due > o_at - l.rate_period THEN
      o_why := 'rate'; o_due := greatest(0.001, o_due + l.rate_period - jb.now());
    ELSE
      o_due := NULL;
    END IF;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.flow_granted(p_board text, l jb.flow_limit, p_at float8, p_n bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN  -- a claim of group l.grp was granted at p_at as grant p_n (jb.flow_check's o_at, o_n): the last count kept
  IF l.rate_count IS NULL THEN RETURN; END IF;
  DELETE FROM jb.flow_grant g WHERE g.board = p_board AND g.grp = l.grp AND g.n <= p_n - l.rate_count;
  INSERT INTO jb.flow_grant (board, grp, n, at) VALUES (p_board, l.grp, p_n, p_at);
END $$;

CREATE OR REPLACE FUNCTION jb.gate(p_board text, OUT o_off boolean, OUT o_names text[], OUT o_held text[],
  OUT o_seqs text[], OUT o_heads bigint[], OUT o_due float8)
LANGUAGE plpgsql AS $$
-- what holds jobs back now, read without locks (wait's look): the board paused, paused names, groups held,
-- sequence groups and their heads, the seconds until the first rate-held group's next permit
DECLARE f jb.flow%ROWTYPE; l jb.flow_limit%ROWTYPE; c record;
BEGIN
  o_off := false; o_names := '{}'; o_held := '{}'; o_seqs := '{}'; o_heads := '{}';
  SELECT * INTO f FROM jb.flow WHERE board = p_board;
  IF NOT FOUND OR f.gates <= 0 THEN RETURN; END IF;
  o_off := f.paused;
  SELECT coalesce(array_agg(p.name), '{}') INTO o_names FROM jb.flow_pause p WHERE p.board = p_board;
  FOR l IN SELECT * FROM jb.flow_limit x WHERE x.board = p_board LOOP
    SELECT * INTO c FROM jb.flow_check(p_board, l, NULL);
    IF c.o_why IS NOT NULL THEN
      o_held := o_held || l.grp;
      IF c.o_why = 'rate' THEN  -- a wait wakes a little after the permit (10 % of the period, 0.1 s at most):
        o_due := least(o_due, c.o_due + least(0.1, l.rate_period / 10));  -- a burst's grants come due together
      END IF;
    ELSIF l.sequence AND c.o_head IS NOT NULL THEN
      o_seqs := o_seqs || l.grp; o_heads := o_heads || c.o_head;
    END IF;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.flow_next(p_board text, p_session bigint, p_owner text, p_names text[], p_nonce uuid)
RETURNS TABLE (r_id bigint, r_gen bigint, r_attempts int, r_posting bytea, r_last_error bytea, r_key text,
               r_parents bigint[], r_results bytea[], r_held text)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
-- claim_next on a gated board: the best ready job nothing holds back. A limited group met is checked under
-- its transaction advisory lock (tried: a group another claimer is checking is skipped in this call); the
-- limit row is read with the lock taken, the group's jobs by the statements after it. r_held: why the jobs
-- it passed over were held back ('concurrency,rate'...; NULL: none), with the claim, or in a row of its own
-- (r_id NULL) when it took none. A paused name's jobs are met in the scan (each name once: v_met)
DECLARE v_paused boolean; v_names text[]; v_skip text[] := '{}'; v_seqs text[] := '{}'; v_heads bigint[] := '{}';
        v_met text[] := '{}'; v_why text[] := '{}'; j record; l jb.flow_limit%ROWTYPE; c record;
BEGIN
  SELECT f.paused, ARRAY(SELECT p.name FROM jb.flow_pause p WHERE p.board = p_board) INTO v_paused, v_names
    FROM jb.flow f WHERE f.board = p_board;
  IF v_paused THEN  -- the board paused: its ready jobs are all held back
    IF EXISTS (SELECT 1 FROM jb.job x WHERE x.board = p_board AND x.state = 0
                 AND CASE WHEN p_names IS NULL THEN left(x.name, 9) <> 'jobboard.' ELSE x.name = ANY(p_names) END) THEN
      RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::int, NULL::bytea, NULL::bytea, NULL::text, NULL::bigint[],
                          NULL::bytea[], 'paused'::text;
    END IF;
    RETURN;
  END IF;
  LOOP
    SELECT x.id, x.attempts, x.max_attempts, x.grp, x.name INTO j FROM jb.job x
     WHERE x.board = p_board AND x.state = 0
       AND CASE WHEN p_names IS NULL THEN left(x.name, 9) <> 'jobboard.' ELSE x.name = ANY(p_names) END
       AND x.name <> ALL(v_met)
       AND (x.grp IS NULL OR (x.grp <> ALL(v_skip) AND (x.grp <> ALL(v_seqs) OR x.id = ANY(v_heads))))
     ORDER BY x.rank, x.id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
      IF cardinality(v_why) > 0 THEN
        RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::int, NULL::bytea, NULL::bytea, NULL::text,
                            NULL::bigint[], NULL::bytea[], array_to_string(v_why, ',');
      END IF;
      RETURN;
    END IF;
    IF j.name = ANY(v_names) THEN  -- paused: its name's jobs are passed over for the rest of the call
      v_met := v_met || j.name; v_why := array_append(array_remove(v_why, 'paused'), 'paused'); CONTINUE;
    END IF;
    l := NULL;
    IF j.grp IS NOT NULL THEN  -- the group first: a held-back job is not trashed for its attempts
      SELECT * INTO l FROM jb.flow_limit x WHERE x.board = p_board AND x.grp = j.grp
         AND pg_try_advisory_xact_lock(jb.group_key(p_board, j.grp));  -- the group's lock, if it has a limit
      IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM jb.flow_limit x WHERE x.board = p_board AND x.grp = j.grp) THEN
          v_skip := v_skip || j.grp; CONTINUE;  -- another claimer holds the group's lock: not in this call
        END IF;
      ELSIF NOT l.sequence AND l.rate_count IS NULL THEN  -- a concurrency alone: its count, inline
        IF l.concurrency <= (SELECT count(*) FROM jb.job y WHERE y.board = p_board AND y.grp = j.grp AND y.state = 1)
        THEN
          v_skip := v_skip || j.grp; v_why := array_append(array_remove(v_why, 'concurrency'), 'concurrency');
          CONTINUE;
        END IF;
      ELSE
        SELECT * INTO c FROM jb.flow_check(p_board, l, NULL);
        IF c.o_why IS NOT NULL THEN
          v_skip := v_skip || j.grp; v_why := array_append(array_remove(v_why, c.o_why), c.o_why); CONTINUE;
        END IF;
        IF l.sequence AND j.id <> c.o_head THEN  -- only the head: the scan finds it at its own rank
          v_seqs := v_seqs || j.grp; v_heads := v_heads || c.o_head;
          v_why := array_append(array_remove(v_why, 'sequence'), 'sequence'); CONTINUE;
        END IF;
      END IF;
    END IF;
    IF j.max_attempts IS NOT NULL AND j.attempts >= j.max_attempts THEN  -- its turn, but no attempt left
      PERFORM jb.trash_job(p_board, j.id, 'max attempts exceeded (' || j.max_attempts || ')', p_session);
      CONTINUE;  -- no claim, no rate grant
    END IF;
    IF l.rate_count IS NOT NULL THEN PERFORM jb.flow_granted(p_board, l, c.o_at, c.o_n); END IF;
    RETURN QUERY SELECT j.id, t.*, CASE WHEN cardinality(v_why) > 0 THEN array_to_string(v_why, ',') END
                   FROM jb.take(j.id, p_session, p_owner, p_nonce) t;
    RETURN;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.flow_admit(p_board text, p_id bigint, p_name text, p_grp text, p_taken boolean,
  OUT o_why text, OUT o_due float8)
LANGUAGE plpgsql AS $$
-- claim(job) on a gated board: why the job is held back (NULL: admitted, and its rate grant recorded if
-- p_taken: the caller claims it, not trashes it); waits for the group's advisory lock (the caller holds
-- the job's row)
DECLARE l jb.flow_limit%ROWTYPE; c record;
BEGIN
  IF EXISTS (SELECT 1 FROM jb.flow f WHERE f.board = p_board AND f.paused)
     OR EXISTS (SELECT 1 FROM jb.flow_pause p WHERE p.board = p_board AND p.name = p_name) THEN
    o_why := 'paused'; RETURN;
  END IF;
  IF p_grp IS NULL THEN RETURN; END IF;
  SELECT * INTO l FROM jb.flow_limit x WHERE x.board = p_board AND x.grp = p_grp;
  IF NOT FOUND THEN RETURN; END IF;
  PERFORM pg_advisory_xact_lock(jb.group_key(p_board, p_grp));
  SELECT * INTO l FROM jb.flow_limit x WHERE x.board = p_board AND x.grp = p_grp;  -- as it is now
  IF NOT FOUND THEN RETURN; END IF;
  SELECT * INTO c FROM jb.flow_check(p_board, l, p_id);
  o_why := c.o_why; o_due := c.o_due;
  IF o_why IS NULL AND p_taken THEN PERFORM jb.flow_granted(p_board, l, c.o_at, c.o_n); END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.limits(p_board text)
RETURNS TABLE (r_grp text, r_concurrency int, r_sequence boolean, r_count int, r_period float8, r_running bigint,
               r_waiting bigint)
LANGUAGE sql STABLE AS $$
  SELECT l.grp, l.concurrency, l.sequence, l.rate_count, l.rate_period,
         (SELECT count(*) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state = 1),
         (SELECT count(*) FROM jb.job j WHERE j.board = p_board AND j.grp = l.grp AND j.state IN (0, 3))
    FROM jb.flow_limit l WHERE l.board = p_board ORDER BY l.grp COLLATE "C" $$;
"""
