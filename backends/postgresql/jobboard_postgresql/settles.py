"""The board's settles, cancels, reaper and retention as PL/pgSQL functions (one call, one transaction each).

``held`` is the fence every settle starts with: the job's row locked, its state, generation and owner
compared with the claim's, and the holder session's advisory lock probed, before anything is written.
A consume delivers its result to its dependents (locked in id order, after the parent) and readies
those whose last dependency it was, in its own transaction; a trash takes its dependents with it.
``reap`` runs in one board at a time (a transaction-level advisory lock) and releases the claims of
sessions whose lock is free, and of claims whose session row is gone.
"""

from __future__ import annotations

SETTLES = r"""
CREATE OR REPLACE FUNCTION jb.held(p_board text, p_ns int, p_id bigint, p_gen bigint, p_owner text,
  OUT o_status smallint, OUT o_job jb.job)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT * INTO o_job FROM jb.job WHERE id = p_id AND board = p_board FOR UPDATE;
  IF NOT FOUND OR o_job.state <> 1 OR o_job.gen <> p_gen THEN o_status := 1;
  ELSIF o_job.owner <> p_owner THEN o_status := 2;
  ELSIF pg_try_advisory_xact_lock(p_ns, o_job.session::int) THEN o_status := 1;  -- its holder's session is gone
  ELSE o_status := 0;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.settling(p_board text, p_ns int, p_id bigint, p_gen bigint, p_owner text,
  p_retry boolean, p_action "char", OUT o_status smallint, OUT o_job jb.job, OUT o_done boolean)
LANGUAGE plpgsql AS $$  -- a settle's fence; o_done: a retried settle whose first attempt committed (status 0)
DECLARE h record;
BEGIN  -- the row is locked first: a retry waits there for its first attempt's end, then looks for its evidence
  SELECT * INTO h FROM jb.held(p_board, p_ns, p_id, p_gen, p_owner);
  o_done := p_retry AND EXISTS (SELECT 1 FROM jb.done WHERE id = p_id AND gen = p_gen AND action = p_action);
  IF o_done THEN o_status := 0; RETURN; END IF;
  o_status := h.o_status; o_job := h.o_job;
END $$;

CREATE OR REPLACE FUNCTION jb.settle_key(p_board text, p_key text, p_id bigint, p_posting bytea, p_attempts int,
  p_nb float8, p_error bytea) RETURNS void LANGUAGE sql AS $$
  UPDATE jb.key SET settled_at = jb.now(), posting = p_posting, attempts = p_attempts, not_before = p_nb,
         last_error = p_error WHERE board = p_board AND key = p_key AND job_id = p_id $$;

CREATE OR REPLACE FUNCTION jb.deliver(p_board text, p_child bigint, p_parent bigint, p_result bytea)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_pending int; v_nb float8; v_name text;
BEGIN
  UPDATE jb.job SET pending = pending - 1 WHERE id = p_child AND state = 2
  RETURNING pending, not_before, name INTO v_pending, v_nb, v_name;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO jb.result (child, parent, body) VALUES (p_child, p_parent, p_result) ON CONFLICT DO NOTHING;
  IF v_pending <= 0 THEN
    UPDATE jb.job SET state = CASE WHEN v_nb > jb.now() THEN 3 ELSE 0 END WHERE id = p_child;
    INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'ready', p_child, v_name);
    PERFORM jb.wake(p_board);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.trash_job(p_board text, p_id bigint, p_reason text, p_caller bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE j jb.job%ROWTYPE; c record;
BEGIN
  DELETE FROM jb.job WHERE id = p_id RETURNING * INTO j;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO jb.trash (id, board, name, rank, attempts, not_before, pending, key, token, trash_ttl, posting,
                        last_error, reason, trashed_at, max_attempts, keep_result, result_ttl, gen, parents, grp)
  VALUES (j.id, j.board, j.name, j.rank, j.attempts, j.not_before, j.pending, j.key, j.token, j.trash_ttl,
          j.posting, j.last_error, p_reason, jb.now(), j.max_attempts, j.keep_result, j.result_ttl, j.gen, j.parents,
          j.grp)
  ON CONFLICT (id) DO NOTHING;
  IF j.key IS NOT NULL THEN
    PERFORM jb.settle_key(p_board, j.key, p_id, j.posting, j.attempts, j.not_before, j.last_error);
  END IF;
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'trashed', p_id, p_reason);
  IF j.state = 1 THEN PERFORM jb.tell(j.session, p_caller, p_id); END IF;
  IF j.grp IS NOT NULL THEN PERFORM jb.permit_back(p_board); END IF;  -- a permit, or a sequence's turn
  IF j.parents THEN DELETE FROM jb.dep WHERE child = p_id; END IF;
  IF j.children THEN
    FOR c IN SELECT d.child FROM jb.dep d WHERE d.parent = p_id ORDER BY d.child LOOP
      PERFORM jb.trash_job(p_board, c.child,
                           'dependency ' || p_id || ' (' || j.name || ') was trashed: ' || p_reason, p_caller);
    END LOOP;
    DELETE FROM jb.dep WHERE parent = p_id;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.consume(p_board text, p_ns int, p_session bigint, p_id bigint, p_gen bigint,
  p_owner text, p_result bytea, p_retry boolean, OUT r_status smallint, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE h record; j jb.job%ROWTYPE; c record;
BEGIN
  SELECT * INTO h FROM jb.settling(p_board, p_ns, p_id, p_gen, p_owner, p_retry, 'c');
  r_status := h.o_status; j := h.o_job; r_detail := j.owner;
  IF r_status <> 0 OR h.o_done THEN RETURN; END IF;
  DELETE FROM jb.job WHERE id = p_id;
  INSERT INTO jb.done (id, gen, action) VALUES (p_id, p_gen, 'c');
  IF j.key IS NOT NULL THEN
    PERFORM jb.settle_key(p_board, j.key, p_id, j.posting, j.attempts, j.not_before, j.last_error);
  END IF;
  IF j.keep_result THEN
    INSERT INTO jb.kept (id, board, result, at, ttl) VALUES (p_id, p_board, p_result, jb.now(), j.result_ttl)
    ON CONFLICT (id) DO UPDATE SET result = EXCLUDED.result, at = EXCLUDED.at, ttl = EXCLUDED.ttl;
  END IF;
  IF j.parents THEN DELETE FROM jb.result WHERE child = p_id; END IF;
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'consumed', p_id, j.name);
  IF j.session <> p_session THEN PERFORM jb.tell(j.session, p_session, p_id); END IF;
  IF j.grp IS NOT NULL THEN PERFORM jb.permit_back(p_board); END IF;  -- its permit returns
  IF j.children THEN
    FOR c IN SELECT d.child FROM jb.dep d WHERE d.parent = p_id ORDER BY d.child LOOP
      PERFORM jb.deliver(p_board, c.child, p_id, p_result);
    END LOOP;
    DELETE FROM jb.dep WHERE parent = p_id;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.consume_many(p_board text, p_ns int, p_session bigint, p_retry boolean,
  p_ids bigint[], p_gens bigint[], p_owners text[], p_results bytea[], OUT o_status smallint[], OUT o_detail text[])
LANGUAGE plpgsql AS $$
-- item i consumes p_ids[i] (NULL: nothing), fenced as jb.consume: o_status[i] 0 applied, 1 lost, 2 not owner.
-- Rows are locked in id order; the plain ones (no key, kept result or links) are deleted by one statement each
-- for the batch, the others go through jb.consume; a job named twice is consumed once (the later ones: lost)
DECLARE n int := coalesce(cardinality(p_ids), 0); i int; j record; c record; v_alive bigint[] := '{}';
        v_plain bigint[] := '{}'; v_gens bigint[] := '{}'; v_names text[] := '{}'; v_rest int[] := '{}';
        v_grouped boolean := false;
BEGIN
  o_status := array_fill(NULL::smallint, ARRAY[n]); o_detail := array_fill(NULL::text, ARRAY[n]);
  PERFORM 1 FROM jb.job x WHERE x.id = ANY(p_ids) AND x.board = p_board ORDER BY x.id FOR UPDATE;
  FOR i IN 1 .. n LOOP
    CONTINUE WHEN p_ids[i] IS NULL;
    IF p_retry AND EXISTS (SELECT 1 FROM jb.done d WHERE d.id = p_ids[i] AND d.gen = p_gens[i] AND d.action = 'c') THEN
      o_status[i] := 0; CONTINUE;  -- a first attempt that committed left its evidence
    END IF;
    SELECT x.state, x.gen, x.owner, x.session, x.name, x.grp,
           x.key IS NULL AND NOT x.keep_result AND NOT x.parents AND NOT x.children AS plain
      INTO j FROM jb.job x WHERE x.id = p_ids[i] AND x.board = p_board;
    o_detail[i] := j.owner;
    IF NOT FOUND OR j.state <> 1 OR j.gen <> p_gens[i] OR p_ids[i] = ANY(v_plain) THEN o_status[i] := 1;
    ELSIF j.owner <> p_owners[i] THEN o_status[i] := 2;
    ELSIF NOT j.session = ANY(v_alive) AND pg_try_advisory_xact_lock(p_ns, j.session::int) THEN
      o_status[i] := 1;  -- its holder's session is gone
    ELSE
      IF NOT j.session = ANY(v_alive) THEN v_alive := v_alive || j.session; END IF;
      IF j.plain THEN
        o_status[i] := 0;
        v_plain := v_plain || p_ids[i]; v_gens := v_gens || p_gens[i]; v_names := v_names || j.name;
        v_grouped := v_grouped OR j.grp IS NOT NULL;
        IF j.session <> p_session THEN PERFORM jb.tell(j.session, p_session, p_ids[i]); END IF;
      ELSE
        v_rest := v_rest || i;
      END IF;
    END IF;
  END LOOP;
  IF cardinality(v_plain) > 0 THEN
    DELETE FROM jb.job WHERE id = ANY(v_plain);
    INSERT INTO jb.done (id, gen, action) SELECT u.id, u.gen, 'c' FROM unnest(v_plain, v_gens) AS u(id, gen);
    INSERT INTO jb.event (board, kind, job, detail)
    SELECT p_board, 'consumed', u.id, u.name FROM unnest(v_plain, v_names) AS u(id, name);
    IF v_grouped THEN PERFORM jb.permit_back(p_board); END IF;  -- permits return
  END IF;
  FOREACH i IN ARRAY v_rest LOOP
    SELECT * INTO c FROM jb.consume(p_board, p_ns, p_session, p_ids[i], p_gens[i], p_owners[i], p_results[i], false);
    o_status[i] := c.r_status; o_detail[i] := c.r_detail;
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION jb.consume_next(p_board text, p_ns int, p_session bigint, p_id bigint, p_gen bigint,
  p_owner text, p_result bytea, p_retry boolean, p_names text[], p_nonce uuid)
RETURNS TABLE (r_status smallint, r_detail text, r_id bigint, r_gen bigint, r_attempts int, r_posting bytea,
               r_last_error bytea, r_key text, r_parents bigint[], r_results bytea[], r_held text)
LANGUAGE plpgsql AS $$
DECLARE c record;
BEGIN
  SELECT * INTO c FROM jb.consume(p_board, p_ns, p_session, p_id, p_gen, p_owner, p_result, p_retry);
  r_status := c.r_status; r_detail := c.r_detail;
  IF r_status = 0 AND jb.alive(p_ns, p_session) THEN
    SELECT * INTO r_id, r_gen, r_attempts, r_posting, r_last_error, r_key, r_parents, r_results, r_held
      FROM jb.claim_next(p_board, p_ns, p_session, p_owner, p_names, p_nonce, p_retry);
  END IF;
  RETURN NEXT;
END $$;

CREATE OR REPLACE FUNCTION jb.release(p_board text, p_ns int, p_session bigint, p_id bigint, p_gen bigint,
  p_owner text, p_retry_after float8, p_error bytea, p_retry boolean, OUT r_status smallint, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE h record; v_nb float8;
BEGIN
  SELECT * INTO h FROM jb.settling(p_board, p_ns, p_id, p_gen, p_owner, p_retry, 'a');
  r_status := h.o_status; r_detail := (h.o_job).owner;
  IF r_status <> 0 OR h.o_done THEN RETURN; END IF;
  v_nb := CASE WHEN p_retry_after IS NULL THEN NULL ELSE jb.now() + p_retry_after END;
  UPDATE jb.job SET state = CASE WHEN v_nb IS NULL THEN 0 ELSE 3 END, not_before = v_nb, session = NULL,
         owner = NULL, nonce = NULL, progress = NULL, last_error = coalesce(p_error, last_error)
   WHERE id = p_id;
  INSERT INTO jb.done (id, gen, action) VALUES (p_id, p_gen, 'a');
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'released', p_id, 'abandoned by ' || p_owner);
  PERFORM jb.tell((h.o_job).session, p_session, p_id);
  PERFORM jb.wake(p_board);
END $$;

CREATE OR REPLACE FUNCTION jb.unclaim(p_board text, p_id bigint, p_gen bigint, p_owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE jb.job SET state = 0, attempts = attempts - 1, session = NULL, owner = NULL, nonce = NULL, progress = NULL
   WHERE id = p_id AND board = p_board AND state = 1 AND gen = p_gen AND owner = p_owner;
  IF NOT FOUND THEN RETURN false; END IF;
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'released', p_id, 'claim by ' || p_owner || ' cancelled before its caller had it');
  PERFORM jb.wake(p_board);
  RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jb.trash(p_board text, p_ns int, p_session bigint, p_id bigint, p_gen bigint,
  p_owner text, p_reason text, p_error bytea, p_retry boolean, OUT r_status smallint, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE h record;
BEGIN
  SELECT * INTO h FROM jb.settling(p_board, p_ns, p_id, p_gen, p_owner, p_retry, 't');
  r_status := h.o_status; r_detail := (h.o_job).owner;
  IF r_status <> 0 OR h.o_done THEN RETURN; END IF;
  IF p_error IS NOT NULL THEN UPDATE jb.job SET last_error = p_error WHERE id = p_id; END IF;
  INSERT INTO jb.done (id, gen, action) VALUES (p_id, p_gen, 't');
  PERFORM jb.trash_job(p_board, p_id, p_reason, p_session);
END $$;

CREATE OR REPLACE FUNCTION jb.progress(p_board text, p_ns int, p_id bigint, p_gen bigint, p_owner text,
  p_progress bytea, OUT r_status smallint, OUT r_detail text)
LANGUAGE plpgsql AS $$
DECLARE h record;
BEGIN
  SELECT * INTO h FROM jb.held(p_board, p_ns, p_id, p_gen, p_owner);
  r_status := h.o_status; r_detail := (h.o_job).owner;
  IF r_status = 0 THEN UPDATE jb.job SET progress = p_progress WHERE id = p_id; END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.cancel(p_board text, p_session bigint, p_id bigint, p_reason text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM jb.job WHERE id = p_id AND board = p_board AND state <> 9 FOR UPDATE;
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM jb.trash_job(p_board, p_id, p_reason, p_session);
  RETURN true;
END $$;

CREATE OR REPLACE FUNCTION jb.release_session(p_session bigint, p_why text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE j record; n int := 0;
BEGIN
  FOR j IN SELECT id, board, owner FROM jb.job WHERE session = p_session AND state = 1 ORDER BY id FOR UPDATE LOOP
    UPDATE jb.job SET state = 0, session = NULL, owner = NULL, nonce = NULL, progress = NULL WHERE id = j.id;
    INSERT INTO jb.event (board, kind, job, detail) VALUES (j.board, 'released', j.id, 'owner ' || j.owner || ' ' || p_why);
    PERFORM jb.wake(j.board);
    n := n + 1;
  END LOOP;
  RETURN n;
END $$;

CREATE OR REPLACE FUNCTION jb.close_session(p_session bigint) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM jb.session WHERE id = p_session;
  RETURN jb.release_session(p_session, 'closed its board');
END $$;

CREATE OR REPLACE FUNCTION jb.reap(p_ns int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE s record; n int := 0;
BEGIN
  IF NOT pg_try_advisory_xact_lock(p_ns, 0) THEN RETURN 0; END IF;
  FOR s IN SELECT id FROM jb.session ORDER BY id LOOP
    IF pg_try_advisory_xact_lock(p_ns, s.id::int) THEN  -- nobody holds it: its connection is gone
      DELETE FROM jb.session WHERE id = s.id;  -- waits for claims in flight under it (FOR KEY SHARE)
      n := n + 1 + jb.release_session(s.id, 'lost its session');
    END IF;
  END LOOP;
  FOR s IN SELECT DISTINCT j.session AS id FROM jb.job j WHERE j.state = 1
            AND NOT EXISTS (SELECT 1 FROM jb.session x WHERE x.id = j.session) LOOP
    n := n + jb.release_session(s.id, 'lost its session');  -- a claim that raced its session's reaping
  END LOOP;
  RETURN n;
END $$;

CREATE OR REPLACE FUNCTION jb.requeue(p_board text, p_id bigint, p_reset boolean,
  OUT r_status smallint, OUT r_posting bytea, OUT r_attempts int, OUT r_last_error bytea, OUT r_key text,
  OUT r_pending int)
LANGUAGE plpgsql AS $$
DECLARE t jb.trash%ROWTYPE;
BEGIN
  SELECT * INTO t FROM jb.trash WHERE id = p_id AND board = p_board FOR UPDATE;
  IF NOT FOUND THEN r_status := 1; RETURN; END IF;
  IF t.pending > 0 THEN r_status := 2; r_pending := t.pending; RETURN; END IF;
  DELETE FROM jb.trash WHERE id = p_id;
  r_key := t.key;
  IF r_key IS NOT NULL THEN
    PERFORM 1 FROM jb.key k WHERE k.board = p_board AND k.key = r_key AND k.job_id <> p_id FOR UPDATE;
    IF FOUND THEN r_key := NULL;
    ELSE
      INSERT INTO jb.key (board, key, job_id) VALUES (p_board, r_key, p_id)
      ON CONFLICT (board, key) DO UPDATE SET job_id = p_id, settled_at = NULL, posting = NULL, attempts = NULL,
                                             not_before = NULL, last_error = NULL;
    END IF;
  END IF;
  r_attempts := CASE WHEN p_reset THEN 0 ELSE t.attempts END;
  INSERT INTO jb.job (id, board, name, rank, state, gen, attempts, max_attempts, not_before, pending, key, token,
                      keep_result, result_ttl, trash_ttl, posting, last_error, parents, grp)
  VALUES (t.id, t.board, t.name, t.rank, 0, t.gen, r_attempts, t.max_attempts, NULL, 0, r_key, t.token,
          t.keep_result, t.result_ttl, t.trash_ttl, t.posting, t.last_error, t.parents, t.grp);
  INSERT INTO jb.event (board, kind, job, detail) VALUES (p_board, 'posted', p_id, t.name);
  PERFORM jb.wake(p_board);
  r_status := 0; r_posting := t.posting; r_last_error := t.last_error;
END $$;

CREATE OR REPLACE FUNCTION jb.purge(p_board text, p_older_than float8) RETURNS int LANGUAGE sql AS $$
  WITH t AS (DELETE FROM jb.trash WHERE board = p_board AND trashed_at <= jb.now() - p_older_than
             RETURNING id, key),
       k AS (DELETE FROM jb.key k USING t WHERE k.board = p_board AND k.key = t.key AND k.job_id = t.id),
       r AS (DELETE FROM jb.result r USING t WHERE r.child = t.id)
  SELECT count(*)::int FROM t $$;

CREATE OR REPLACE FUNCTION jb.sweep(p_board text, p_ns int, p_rttl float8, p_tttl float8, p_retention float8)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_xid xid8;
BEGIN
  DELETE FROM jb.kept WHERE board = p_board AND coalesce(ttl, p_rttl) > 0
     AND at + coalesce(ttl, p_rttl) <= jb.now();
  WITH t AS (DELETE FROM jb.trash WHERE board = p_board AND coalesce(trash_ttl, p_tttl) > 0
                AND trashed_at + coalesce(trash_ttl, p_tttl) <= jb.now() RETURNING id, key),
       k AS (DELETE FROM jb.key k USING t WHERE k.board = p_board AND k.key = t.key AND k.job_id = t.id)
  DELETE FROM jb.result r USING t WHERE r.child = t.id;
  DELETE FROM jb.key WHERE board = p_board AND settled_at <= jb.now() - p_retention;
  SELECT e.xid INTO v_xid FROM jb.event e WHERE e.board = p_board AND e.at >= now() - interval '2 minutes'
   ORDER BY e.board, e.xid LIMIT 1;
  DELETE FROM jb.event e WHERE e.board = p_board AND (v_xid IS NULL OR e.xid < v_xid)
     AND e.at < now() - interval '2 minutes';
  IF pg_try_advisory_xact_lock(p_ns, -2) THEN
    DELETE FROM jb.done WHERE at < now() - interval '10 minutes';
  END IF;
END $$;

CREATE OR REPLACE FUNCTION jb.events(p_board text, p_from bigint)
RETURNS TABLE (r_kind text, r_job bigint, r_detail text, r_upto bigint, r_id bigint, r_xid bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE v_upto bigint := (pg_snapshot_xmin(pg_current_snapshot())::text)::bigint;
BEGIN
  RETURN QUERY SELECT e.kind, e.job, e.detail, v_upto, e.id, (e.xid::text)::bigint FROM jb.event e
    WHERE e.board = p_board AND e.xid >= (p_from::text)::xid8 ORDER BY e.xid, e.id;
  IF NOT FOUND THEN r_upto := v_upto; RETURN NEXT; END IF;
END $$;
"""
