"""The board's posts and claims as PL/pgSQL functions: each state change is one call, one transaction, one
round trip (the settles, the reaper and retention are in :mod:`jobboard_postgresql.settles`).

Fencing: a settle locks the job's row (``FOR UPDATE``), compares state, generation and owner, and probes
the holding session's advisory lock (``pg_try_advisory_xact_lock``: true means its connection is gone)
before it writes, all inside the one function call. Claims take ``FOR UPDATE SKIP LOCKED`` over the
partial index of ready jobs in priority-then-age order, after promoting due delayed jobs. Locks are
taken parent first, then dependents in id order (no deadlock between consumes, trashes and posts).
A job becoming claimable calls ``wake``: one idle session (the longest idle) is told, in the same
transaction (NOTIFY is delivered at commit); with no idle session, no NOTIFY is sent at all.
"""

from __future__ import annotations

FUNCTIONS = r"""
CREATE OR REPLACE FUNCTION jb.now() RETURNS float8 LANGUAGE sql AS
$$ SELECT extract(epoch FROM clock_timestamp())::float8 $$;

CREATE OR REPLACE FUNCTION jb.wake(p_board text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v bigint;
BEGIN
  UPDATE jb.session s SET idle_since = NULL
   WHERE s.id = (SELECT i.id FROM jb.session i WHERE i.board = p_board AND i.idle_since IS NOT NULL
                 ORDER BY i.idle_since LIMIT 1 FOR UPDATE SKIP LOCKED)
  RETURNING s.id INTO v;
  IF v IS NOT NULL THEN PERFORM pg_notify('@CHANNEL@_' || v, 'w'); END IF;
  RETURN v IS NOT NULL;
END $$;

CREATE OR REPLACE FUNCTION jb.tell(p_session bigint, p_caller bigint, p_job bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_session IS NOT NULL AND p_session IS DISTINCT FROM p_caller THEN
    PERFORM pg_notify('@CHANNEL@_' || p_session, 'c' || p_job);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.alive(p_ns int, p_session bigint) RETURNS boolean LANGUAGE sql AS $$
  SELECT NOT pg_try_advisory_xact_lock(p_ns, p_session::int) $$;

CREATE OR REPLACE FUNCTION jb.turn(p_key text) RETURNS void LANGUAGE sql AS $$
  SELECT pg_advisory_xact_lock(hashtextextended('@CHANNEL@:' || p_key, 0)) $$;

CREATE OR REPLACE FUNCTION jb.fence(p_nonce uuid, p_retry boolean) RETURNS boolean LANGUAGE plpgsql AS $$
-- a call's fence, its transaction's first step: the lock of its nonce (a retry waits here, at most 1 s a try,
-- until its first attempt's transaction has ended: the retry's look for its evidence comes after); true for a
-- first attempt that came after its retry (its request was late): it must do nothing, the retry's work stands
DECLARE v_old text;
BEGIN
  IF NOT p_retry THEN
    PERFORM jb.turn(p_nonce::text);
    RETURN EXISTS (SELECT 1 FROM jb.retried r WHERE r.nonce = p_nonce);
  END IF;
  v_old := current_setting('lock_timeout');
  PERFORM set_config('lock_timeout', '1000', true);
  PERFORM jb.turn(p_nonce::text);
  PERFORM set_config('lock_timeout', v_old, true);
  INSERT INTO jb.retried (nonce) VALUES (p_nonce) ON CONFLICT (nonce) DO NOTHING;
  DELETE FROM jb.retried WHERE at < now() - interval '1 hour';
  RETURN false;
END $$;

CREATE OR REPLACE FUNCTION jb.posting(
  p_board text, p_name text, p_rank smallint, p_max int, p_not_before float8, p_key text, p_token uuid,
  p_keep boolean, p_rttl float8, p_tttl float8, p_deps bigint[], p_posting bytea, p_retention float8,
  p_retry boolean, p_grp text)
RETURNS TABLE (r_id bigint, r_state smallint, r_attempts int, r_not_before float8, r_posting bytea,
               r_last_error bytea, r_progress bytea, r_key text, r_missing text)
LANGUAGE plpgsql AS $$  -- a posting, unfenced (jb.post, jb.post_many fence)
DECLARE v_id bigint; v_state smallint; k jb.key%ROWTYPE; v_n int := coalesce(cardinality(p_deps), 0);
BEGIN
  IF p_retry THEN
    RETURN QUERY SELECT j.id, j.state, j.attempts, j.not_before, j.posting, j.last_error, j.progress, j.key,
                        NULL::text FROM jb.job j WHERE j.token = p_token AND j.board = p_board;
    IF FOUND THEN RETURN; END IF;
  END IF;
  LOOP
    IF p_key IS NOT NULL THEN
      SELECT * INTO k FROM jb.key WHERE board = p_board AND key = p_key FOR UPDATE;
      IF FOUND THEN
        IF k.settled_at IS NULL THEN
          RETURN QUERY SELECT j.id, j.state, j.attempts, j.not_before, j.posting, j.last_error, j.progress,
                              j.key, NULL::text FROM jb.job j WHERE j.id = k.job_id;
          IF FOUND THEN RETURN; END IF;
        ELSIF jb.now() - k.settled_at < p_retention THEN
          RETURN QUERY SELECT k.job_id, (-1)::smallint, k.attempts, k.not_before, k.posting, k.last_error,
                              NULL::bytea, p_key, NULL::text;
          RETURN;
        END IF;
        DELETE FROM jb.key WHERE board = p_board AND key = p_key;
      END IF;
    END IF;
    IF v_n > 0 THEN
      PERFORM 1 FROM jb.job j WHERE j.id = ANY(p_deps) ORDER BY j.id FOR KEY SHARE;
      SELECT string_agg(d::text, ', ') INTO r_missing FROM unnest(p_deps) d
       WHERE NOT EXISTS (SELECT 1 FROM jb.job j WHERE j.id = d AND j.board = p_board AND j.state <> 9);
      IF r_missing IS NOT NULL THEN RETURN NEXT; RETURN; END IF;
    END IF;
    v_id := nextval('jb.job_id');
    IF p_key IS NULL THEN EXIT; END IF;
    INSERT INTO jb.key (board, key, job_id) VALUES (p_board, p_key, v_id) ON CONFLICT DO NOTHING;
    EXIT WHEN FOUND;
  END LOOP;
  v_state := CASE WHEN v_n > 0 THEN 2 WHEN p_not_before > jb.now() THEN 3 ELSE 0 END;
  INSERT INTO jb.job (id, board, name, rank, state, max_attempts, not_before, pending, key, token, keep_result,
                      result_ttl, trash_ttl, posting, parents, grp)
  VALUES (v_id, p_board, p_name, p_rank, v_state, p_max, p_not_before, v_n, p_key, p_token, p_keep, p_rttl,
          p_tttl, p_posting, v_n > 0, p_grp);
  IF v_n > 0 THEN
    INSERT INTO jb.dep (parent, child) SELECT d, v_id FROM unnest(p_deps) d;
    UPDATE jb.job SET children = true WHERE id = ANY(p_deps) AND NOT children;
  END IF;
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'posted', v_id, p_name);
  IF v_state <> 2 THEN PERFORM jb.wake(p_board); END IF;  -- a delayed job too: the woken one keeps its time
  RETURN QUERY SELECT v_id, v_state, 0, p_not_before, p_posting, NULL::bytea, NULL::bytea, p_key, NULL::text;
END $$;

CREATE OR REPLACE FUNCTION jb.post(
  p_board text, p_name text, p_rank smallint, p_max int, p_not_before float8, p_key text, p_token uuid,
  p_keep boolean, p_rttl float8, p_tttl float8, p_deps bigint[], p_posting bytea, p_retention float8,
  p_retry boolean, p_grp text)
RETURNS TABLE (r_id bigint, r_state smallint, r_attempts int, r_not_before float8, r_posting bytea,
               r_last_error bytea, r_progress bytea, r_key text, r_missing text)
LANGUAGE plpgsql AS $$  -- one post, fenced by its token (jb.fence)
BEGIN
  IF jb.fence(p_token, p_retry) THEN RETURN; END IF;
  RETURN QUERY SELECT * FROM jb.posting(p_board, p_name, p_rank, p_max, p_not_before, p_key, p_token, p_keep, p_rttl,
                                        p_tttl, p_deps, p_posting, p_retention, p_retry, p_grp);
END $$;

CREATE OR REPLACE FUNCTION jb.post_plain(
  p_board text, p_names text[], p_ranks smallint[], p_maxes int[], p_not_befores float8[], p_tokens uuid[],
  p_keeps boolean[], p_rttls float8[], p_tttls float8[], p_postings bytea[], p_groups text[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$  -- a batch without keys or links: one INSERT, ids in the batch's order; a NULL column
DECLARE v_ids bigint[]; v_ready int; v_now float8 := jb.now();  -- (not an array) is NULL for every posting
BEGIN
  IF jb.fence(p_tokens[1], false) THEN RETURN NULL; END IF;  -- a retry goes through jb.post_many
  WITH ins AS (
      INSERT INTO jb.job (id, board, name, rank, state, max_attempts, not_before, token, keep_result, result_ttl,
                          trash_ttl, posting, grp)
      SELECT nextval('jb.job_id'), p_board, u.name, u.rank, CASE WHEN u.nb > v_now THEN 3 ELSE 0 END, u.max,
             u.nb, u.token, coalesce(u.keep, false), u.rttl, u.tttl, u.posting, u.grp
        FROM unnest(p_names, p_ranks, p_maxes, p_not_befores, p_tokens, p_keeps, p_rttls, p_tttls, p_postings,
                    p_groups) WITH ORDINALITY AS u(name, rank, max, nb, token, keep, rttl, tttl, posting, grp, ord)
       ORDER BY u.ord
      RETURNING id)
  SELECT array_agg(ins.id ORDER BY ins.id) INTO v_ids FROM ins;
  IF EXISTS (SELECT 1 FROM jb.observed o WHERE o.board = p_board AND o.until > v_now) THEN  -- events() runs
    INSERT INTO jb.event (board, kind, job, detail) SELECT p_board, 'posted', e.id, e.name
      FROM unnest(v_ids, p_names) AS e(id, name);
  END IF;
  v_ready := coalesce(cardinality(v_ids), 0);
  WHILE v_ready > 0 AND jb.wake(p_board) LOOP v_ready := v_ready - 1; END LOOP;
  RETURN v_ids;
END $$;

CREATE OR REPLACE FUNCTION jb.post_head(p_board text, p_names text[], p_token uuid) RETURNS text
LANGUAGE plpgsql AS $$  -- a plain batch that COPY writes next in this transaction: its ids (ascending, as text:
DECLARE v_ids bigint[]; v_ready int := coalesce(cardinality(p_names), 0);  -- no array type for the driver to
BEGIN                                                                      -- look up), its events, its wake-ups
  IF jb.fence(p_token, false) THEN RETURN NULL; END IF;  -- fenced by its first posting's token
  SELECT array_agg(x.id ORDER BY x.id) INTO v_ids
    FROM (SELECT nextval('jb.job_id') AS id FROM generate_series(1, v_ready)) x;
  IF EXISTS (SELECT 1 FROM jb.observed o WHERE o.board = p_board AND o.until > jb.now()) THEN  -- events() runs
    INSERT INTO jb.event (board, kind, job, detail) SELECT p_board, 'posted', e.id, e.name
      FROM unnest(v_ids, p_names) AS e(id, name);
  END IF;
  WHILE v_ready > 0 AND jb.wake(p_board) LOOP v_ready := v_ready - 1; END LOOP;
  RETURN array_to_string(v_ids, ',');
END $$;

CREATE OR REPLACE FUNCTION jb.post_many(
  p_board text, p_names text[], p_ranks smallint[], p_maxes int[], p_not_befores float8[], p_keys text[],
  p_tokens uuid[], p_keeps boolean[], p_rttls float8[], p_tttls float8[], p_deps text[], p_postings bytea[],
  p_retention float8, p_retry boolean, p_groups text[])
RETURNS TABLE (r_id bigint, r_state smallint, r_attempts int, r_not_before float8, r_posting bytea,
               r_last_error bytea, r_progress bytea, r_key text, r_missing text)
LANGUAGE plpgsql AS $$  -- keys, links or a retry: each posting as jb.post does it
DECLARE i int; p record;
BEGIN
  IF jb.fence(p_tokens[1], p_retry) THEN RETURN; END IF;  -- one fence for the batch: its first token
  FOR i IN 1 .. coalesce(cardinality(p_names), 0) LOOP
    SELECT * INTO p FROM jb.posting(p_board, p_names[i], p_ranks[i], p_maxes[i], p_not_befores[i], p_keys[i],
      p_tokens[i], p_keeps[i], p_rttls[i], p_tttls[i], string_to_array(p_deps[i], ',')::bigint[], p_postings[i],
      p_retention, p_retry, p_groups[i]);
    r_id := p.r_id; r_state := p.r_state; r_attempts := p.r_attempts; r_not_before := p.r_not_before;
    r_posting := p.r_posting; r_last_error := p.r_last_error; r_progress := p.r_progress; r_key := p.r_key;
    r_missing := p.r_missing;
    RETURN NEXT;
    EXIT WHEN r_missing IS NOT NULL;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.take(p_id bigint, p_session bigint, p_owner text, p_nonce uuid,
  OUT r_gen bigint, OUT r_attempts int, OUT r_posting bytea, OUT r_last_error bytea, OUT r_key text,
  OUT r_parents bigint[], OUT r_results bytea[])
LANGUAGE plpgsql AS $$
DECLARE v_board text; v_parents boolean;
BEGIN
  UPDATE jb.job SET state = 1, gen = gen + 1, attempts = attempts + 1, session = p_session, owner = p_owner,
         nonce = p_nonce, not_before = NULL, progress = NULL WHERE id = p_id
  RETURNING gen, attempts, posting, last_error, key, board, parents
       INTO r_gen, r_attempts, r_posting, r_last_error, r_key, v_board, v_parents;
  INSERT INTO jb.event (board, kind, job, detail) VALUES (v_board, 'claimed', p_id, p_owner);
  IF v_parents THEN
    SELECT array_agg(r.parent ORDER BY r.parent), array_agg(r.body ORDER BY r.parent) INTO r_parents, r_results
      FROM jb.result r WHERE r.child = p_id;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.retaken(p_session bigint, p_nonce uuid,
  OUT r_id bigint, OUT r_gen bigint, OUT r_attempts int, OUT r_posting bytea, OUT r_last_error bytea,
  OUT r_key text, OUT r_parents bigint[], OUT r_results bytea[])
LANGUAGE plpgsql AS $$
BEGIN
  SELECT j.id, j.gen, j.attempts, j.posting, j.last_error, j.key INTO r_id, r_gen, r_attempts, r_posting,
         r_last_error, r_key FROM jb.job j WHERE j.session = p_session AND j.state = 1 AND j.nonce = p_nonce;
  IF r_id IS NOT NULL THEN
    SELECT array_agg(r.parent ORDER BY r.parent), array_agg(r.body ORDER BY r.parent) INTO r_parents, r_results
      FROM jb.result r WHERE r.child = r_id;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.claim_next(p_board text, p_ns int, p_session bigint, p_owner text, p_names text[],
  p_nonce uuid, p_retry boolean)
RETURNS TABLE (r_id bigint, r_gen bigint, r_attempts int, r_posting bytea, r_last_error bytea, r_key text,
               r_parents bigint[], r_results bytea[], r_held text)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_sort = off AS $$
DECLARE v_id bigint; v_attempts int; v_max int; v_alive boolean; v_gated boolean;
BEGIN
  IF jb.fence(p_nonce, p_retry) THEN RETURN; END IF;
  IF p_retry THEN
    RETURN QUERY SELECT t.*, NULL::text FROM jb.retaken(p_session, p_nonce) t WHERE t.r_id IS NOT NULL;
    IF FOUND THEN RETURN; END IF;
  END IF;
  SELECT jb.alive(p_ns, p_session), coalesce((SELECT f.gates > 0 FROM jb.flow f WHERE f.board = p_board), false)
    INTO v_alive, v_gated;  -- one statement for both (jb.gated, inline)
  IF NOT v_alive THEN
    RAISE EXCEPTION 'jobboard session % is gone', p_session USING ERRCODE = 'JB001';
  END IF;
  UPDATE jb.job SET state = 0 WHERE id IN (SELECT d.id FROM jb.job d WHERE d.board = p_board AND d.state = 3
                                           AND d.not_before <= jb.now() FOR UPDATE SKIP LOCKED);
  IF v_gated THEN  -- limits or pauses: jb.flow_next (flow_sql.py)
    RETURN QUERY SELECT * FROM jb.flow_next(p_board, p_session, p_owner, p_names, p_nonce);
    RETURN;
  END IF;
  LOOP
    SELECT j.id, j.attempts, j.max_attempts INTO v_id, v_attempts, v_max FROM jb.job j
     WHERE j.board = p_board AND j.state = 0
       AND CASE WHEN p_names IS NULL THEN left(j.name, 9) <> 'jobboard.' ELSE j.name = ANY(p_names) END
     ORDER BY j.rank, j.id LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN RETURN; END IF;
    IF v_max IS NOT NULL AND v_attempts >= v_max THEN
      PERFORM jb.trash_job(p_board, v_id, 'max attempts exceeded (' || v_max || ')', p_session);
      CONTINUE;
    END IF;
    RETURN QUERY SELECT v_id, t.*, NULL::text FROM jb.take(v_id, p_session, p_owner, p_nonce) t;
    RETURN;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.cycle(p_board text, p_ns int, p_session bigint, p_retry boolean, p_names text[],
  p_ids bigint[], p_gens bigint[], p_owners text[], p_results bytea[], p_claims boolean[], p_nonces uuid[])
RETURNS TABLE (r_ord int, r_status smallint, r_detail text, r_id bigint, r_gen bigint, r_attempts int,
               r_posting bytea, r_last_error bytea, r_key text, r_parents bigint[], r_results bytea[], r_held text)
LANGUAGE plpgsql SET enable_seqscan = off SET enable_sort = off SET plan_cache_mode = force_generic_plan AS $$
-- plans are generic: a custom plan per call (arrays as parameters look worth it) cost 300 us a statement
-- the coalesced calls of one process: item i consumes p_ids[i] (fenced, jb.consume_many) unless it is NULL,
-- then claims the next job for p_owners[i] if p_claims[i] (and its consume was applied, as jb.consume_next)
DECLARE i int; k int; c record; v_want int[] := '{}'; v_plain boolean := false; v_at int := 1; v_k int;
        v_alive boolean; v_gated boolean;
        v_ids bigint[]; v_atts int[]; v_maxes int[]; v_take bigint[]; v_ords int[];
BEGIN
  IF jb.fence(p_nonces[1], p_retry) THEN RETURN; END IF;  -- one fence for the batch: its first nonce
  SELECT * INTO c FROM jb.consume_many(p_board, p_ns, p_session, p_retry, p_ids, p_gens, p_owners, p_results);
  FOR i IN 1 .. coalesce(cardinality(p_owners), 0) LOOP
    IF p_ids[i] IS NOT NULL THEN
      RETURN QUERY SELECT i, c.o_status[i], c.o_detail[i], NULL::bigint, NULL::bigint, NULL::int, NULL::bytea,
                          NULL::bytea, NULL::text, NULL::bigint[], NULL::bytea[], NULL::text;
      IF c.o_status[i] = 0 AND p_claims[i] THEN v_want := v_want || i; END IF;
    ELSIF p_claims[i] THEN
      v_want := v_want || i; v_plain := true;
    END IF;
  END LOOP;
  IF cardinality(v_want) = 0 THEN RETURN; END IF;
  SELECT jb.alive(p_ns, p_session), coalesce((SELECT f.gates > 0 FROM jb.flow f WHERE f.board = p_board), false)
    INTO v_alive, v_gated;  -- one statement for both (jb.gated, inline)
  IF NOT v_alive THEN
    IF v_plain THEN RAISE EXCEPTION 'jobboard session % is gone', p_session USING ERRCODE = 'JB001'; END IF;
    RETURN;
  END IF;
  IF p_retry THEN  -- the claims a first attempt made are this call's (found by their nonces)
    FOR c IN SELECT w.i AS ord, t.* FROM unnest(v_want) AS w(i), jb.retaken(p_session, p_nonces[w.i]) t
              WHERE t.r_id IS NOT NULL LOOP
      RETURN QUERY SELECT c.ord, 0::smallint, NULL::text, c.r_id, c.r_gen, c.r_attempts, c.r_posting, c.r_last_error,
                          c.r_key, c.r_parents, c.r_results, NULL::text;
      v_want := array_remove(v_want, c.ord);
    END LOOP;
  END IF;
  UPDATE jb.job SET state = 0 WHERE id IN (SELECT d.id FROM jb.job d WHERE d.board = p_board AND d.state = 3
                                           AND d.not_before <= jb.now() FOR UPDATE SKIP LOCKED);
  IF v_gated THEN  -- limits or pauses: one item at a time through jb.flow_next (its r_held: with the claim, or
    FOR i IN 1 .. cardinality(v_want) LOOP  -- in a row of its own with r_status NULL when it took none)
      k := v_want[i];
      SELECT * INTO c FROM jb.flow_next(p_board, p_session, p_owners[k], p_names, p_nonces[k]);
      IF FOUND THEN
        RETURN QUERY SELECT k, CASE WHEN c.r_id IS NOT NULL THEN 0::smallint END, NULL::text, c.r_id, c.r_gen,
                            c.r_attempts, c.r_posting, c.r_last_error, c.r_key, c.r_parents, c.r_results, c.r_held;
      END IF;
      IF c.r_id IS NULL THEN  -- none for this item: none for the rest either, held back as the same jobs are
        RETURN QUERY SELECT w.k, NULL::smallint, NULL::text, NULL::bigint, NULL::bigint, NULL::int, NULL::bytea,
                            NULL::bytea, NULL::text, NULL::bigint[], NULL::bytea[], c.r_held
                       FROM unnest(v_want[i + 1:]) AS w(k) WHERE c.r_held IS NOT NULL;
        EXIT;
      END IF;
    END LOOP;
    RETURN;
  END IF;
  WHILE v_at <= cardinality(v_want) LOOP  -- at most one job per item still wanting one: nothing hoarded
    v_k := cardinality(v_want) - v_at + 1;
    SELECT array_agg(q.id ORDER BY q.rank, q.id), array_agg(q.attempts ORDER BY q.rank, q.id),
           array_agg(q.max_attempts ORDER BY q.rank, q.id) INTO v_ids, v_atts, v_maxes
      FROM (SELECT j.id, j.rank, j.attempts, j.max_attempts FROM jb.job j
             WHERE j.board = p_board AND j.state = 0
               AND CASE WHEN p_names IS NULL THEN left(j.name, 9) <> 'jobboard.' ELSE j.name = ANY(p_names) END
             ORDER BY j.rank, j.id LIMIT v_k FOR UPDATE SKIP LOCKED) q;
    EXIT WHEN v_ids IS NULL;
    v_take := '{}'; v_ords := '{}';
    FOR k IN 1 .. cardinality(v_ids) LOOP  -- the best job to the first item: priority, then age
      IF v_maxes[k] IS NOT NULL AND v_atts[k] >= v_maxes[k] THEN
        PERFORM jb.trash_job(p_board, v_ids[k], 'max attempts exceeded (' || v_maxes[k] || ')', p_session);
        CONTINUE;
      END IF;
      v_take := v_take || v_ids[k]; v_ords := v_ords || v_want[v_at]; v_at := v_at + 1;
    END LOOP;
    RETURN QUERY
      WITH u AS (SELECT * FROM unnest(v_take, v_ords) AS u(id, ord)),
           t AS (UPDATE jb.job j SET state = 1, gen = j.gen + 1, attempts = j.attempts + 1, session = p_session,
                        owner = p_owners[u.ord], nonce = p_nonces[u.ord], not_before = NULL, progress = NULL
                   FROM u WHERE j.id = u.id
                 RETURNING u.ord, j.id, j.gen, j.attempts, j.posting, j.last_error, j.key, j.parents, j.owner),
           e AS (INSERT INTO jb.event (board, kind, job, detail) SELECT p_board, 'claimed', t.id, t.owner FROM t)
      SELECT t.ord, 0::smallint, NULL::text, t.id, t.gen, t.attempts, t.posting, t.last_error, t.key, l.parents,
             l.bodies, NULL::text
        FROM t LEFT JOIN LATERAL (SELECT array_agg(x.parent ORDER BY x.parent) AS parents,
                                         array_agg(x.body ORDER BY x.parent) AS bodies
                                    FROM jb.result x WHERE t.parents AND x.child = t.id) l ON true;
    EXIT WHEN cardinality(v_ids) < v_k;  -- the board has no more
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.claim(p_board text, p_ns int, p_session bigint, p_owner text, p_id bigint,
  p_nonce uuid, p_retry boolean)
RETURNS TABLE (r_status smallint, r_detail text, r_gen bigint, r_attempts int, r_posting bytea,
               r_last_error bytea, r_key text, r_parents bigint[], r_results bytea[])
LANGUAGE plpgsql AS $$
DECLARE j jb.job%ROWTYPE; v_why text; v_due float8; v_spent boolean;
BEGIN
  IF jb.fence(p_nonce, p_retry) THEN RETURN; END IF;
  r_status := 0;
  IF p_retry THEN
    RETURN QUERY SELECT 0::smallint, NULL::text, t.r_gen, t.r_attempts, t.r_posting, t.r_last_error, t.r_key,
                        t.r_parents, t.r_results FROM jb.retaken(p_session, p_nonce) t WHERE t.r_id = p_id;
    IF FOUND THEN RETURN; END IF;
  END IF;
  IF NOT jb.alive(p_ns, p_session) THEN
    RAISE EXCEPTION 'jobboard session % is gone', p_session USING ERRCODE = 'JB001';
  END IF;
  SELECT * INTO j FROM jb.job WHERE id = p_id AND board = p_board AND state <> 9 FOR UPDATE;
  IF FOUND AND p_retry AND j.state = 1 AND j.session = p_session AND j.nonce = p_nonce THEN
    -- the first try committed while this retry waited for the row (it was still running when its
    -- connection failed): the claim is this call's own, not another owner's
    RETURN QUERY SELECT 0::smallint, NULL::text, t.r_gen, t.r_attempts, t.r_posting, t.r_last_error, t.r_key,
                        t.r_parents, t.r_results FROM jb.retaken(p_session, p_nonce) t WHERE t.r_id = p_id;
    RETURN;
  END IF;
  IF NOT FOUND THEN r_status := 1;
  ELSIF j.state = 2 THEN r_status := 2; r_detail := j.pending::text;
  ELSIF j.state = 1 THEN r_status := 3; r_detail := j.owner;
  ELSIF j.not_before > jb.now() THEN r_status := 4; r_detail := round((j.not_before - jb.now())::numeric, 1)::text;
  ELSE
    v_spent := j.max_attempts IS NOT NULL AND j.attempts >= j.max_attempts;
    IF jb.gated(p_board) THEN  -- limits or pauses: status 6, 'why [seconds until the next rate permit]'
      SELECT a.o_why, a.o_due INTO v_why, v_due FROM jb.flow_admit(p_board, p_id, j.name, j.grp, NOT v_spent) a;
    END IF;
    IF v_why IS NOT NULL THEN r_status := 6; r_detail := v_why || ' ' || coalesce(v_due::text, '');
    ELSIF v_spent THEN
      PERFORM jb.trash_job(p_board, p_id, 'max attempts exceeded (' || j.max_attempts || ')', p_session);
      r_status := 5; r_detail := j.max_attempts::text;
    ELSE
      SELECT * INTO r_gen, r_attempts, r_posting, r_last_error, r_key, r_parents, r_results
        FROM jb.take(p_id, p_session, p_owner, p_nonce);
    END IF;
  END IF;
  RETURN NEXT;
END $$;
"""
