----------------------------------------------------------------------------
-- Schedules: cron expressions and fixed periods, turned into jobs by
-- jobq.tick, which every worker runs each reap interval (or pg_cron does).
-- A schedule's row keeps next_at, its first occurrence not yet enqueued;
-- a tick enqueues the occurrences due within a minute, each a unique job
-- ('cron:<name>:<epoch seconds>'), and moves next_at past them in the same
-- transaction.
--
-- Cron expressions: five fields (minute 0-59, hour 0-23, day of month
-- 1-31, month 1-12 or jan-dec, day of week 0-7, 0 and 7 Sunday, or
-- sun-sat; names in any case), each *, a, a-b, */s or a-b/s, or a list of
-- these separated by commas.  When both day fields are restricted (neither
-- starts with *), a day matches when either does (Vixie cron); a field
-- that starts with * (*/2 too) counts as unrestricted for that rule, as in
-- Debian's cron and cronsim.
--
-- Time zones and daylight saving time, as Debian's cron and cronsim do it:
--   - an expression whose minute and hour fields both name specific values
--     (neither starts with *), such as '30 2 * * *', is evaluated on the
--     wall clock: an occurrence whose local time is skipped by a
--     spring-forward happens at the end of the gap (02:30 in Berlin on the
--     last Sunday of March runs at 03:00 CEST, once, however many
--     occurrences fell in the gap), and one whose local time repeats at a
--     fall-back happens once, at its first pass (02:30 CEST, not 02:30 CET);
--   - any other expression (such as '*/15 * * * *' or '0 * * * *') is
--     evaluated on real instants: an occurrence is every instant whose local
--     time matches, so none falls in a skipped hour and a repeated hour
--     runs twice.
-- Periods (every => interval) ignore time zones: occurrences are the
-- multiples of the period since the Unix epoch.
----------------------------------------------------------------------------

CREATE TYPE jobq._cron AS (
    minute_next integer[],  -- [1:60]: element m+1 is the first allowed minute >= m, NULL for none
    hour_next   integer[],  -- [1:24]: the same for hours
    dom_next    integer[],  -- [1:31]: element d is the first allowed day of the month >= d
    month_next  integer[],  -- [1:12]: element m is the first allowed month >= m
    dow_gap     integer[],  -- [1:7]: element w+1 is how many days from weekday w (0 Sunday) to an allowed one
    days_or     boolean,    -- both day fields restricted: a day matches when either matches
    fixed_time  boolean     -- minute and hour both restricted: the wall-clock rule for DST
);
COMMENT ON TYPE jobq._cron IS 'Internal: a parsed cron expression (jobq._cron_parse), in the form jobq._cron_walk reads fast.';

/*
 * jobq._cron_field(cron, part, field): the values part (one field of cron)
 * allows, as an array of 60 booleans (element v+1 for value v; the day of
 * week folds 7 into 0).  field is 1 to 5 (minute, hour, day-of-month,
 * month, day-of-week).  Raises 22023 naming the field for anything but *,
 * a, a-b, steps of * or of a-b (s after a slash) and lists of them: an
 * empty list element, a value out of range or an unknown name, a range
 * from high to low, a step outside 1 to the field's number of values, a
 * step of one value (a/s: write a-max/s), any other character (L, W, #, ?).
 */
CREATE FUNCTION jobq._cron_field(cron text, part text, field integer)
RETURNS boolean[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names   constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    lows    constant integer[] := ARRAY[0, 0, 1, 1, 0];
    highs   constant integer[] := ARRAY[59, 23, 31, 12, 7];
    months  constant text[] := ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
    days    constant text[] := ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    label   text := names[field];
    low     integer := lows[field];
    high    integer := highs[field];
    allowed boolean[] := array_fill(false, ARRAY[60]);
    element text;
    base    text;
    bounds  text[];
    ends    integer[];
    step    integer;
    word    text;
    v       integer;
BEGIN
    FOREACH element IN ARRAY string_to_array(part, ',') LOOP
        IF element = '' THEN
            RAISE EXCEPTION 'cron''s % field must not have an empty list element, got %', label, quote_literal(part)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        END IF;
        IF element !~ '^[A-Za-z0-9*]+(-[A-Za-z0-9]+)?(/[0-9]+)?$' THEN
            RAISE EXCEPTION 'cron''s % field must be *, a value, a range a-b, or a step */s or a-b/s (or a list of these), got %',
                            label, quote_literal(element)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron)),
                      HINT = 'L, W, #, ? and a/s are not supported.';
        END IF;
        base := split_part(element, '/', 1);
        step := 1;
        IF strpos(element, '/') > 0 THEN
            IF length(split_part(element, '/', 2)) > 4
               OR split_part(element, '/', 2)::integer NOT BETWEEN 1 AND high - low + 1 THEN
                RAISE EXCEPTION 'cron''s % field must have steps between 1 and %, got %', label, high - low + 1,
                                quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
            END IF;
            step := split_part(element, '/', 2)::integer;
            IF base <> '*' AND strpos(base, '-') = 0 THEN
                RAISE EXCEPTION 'cron''s % field must step over * or a range a-b, got %', label, quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron)),
                          HINT = format('Write %s-%s/%s for every %s from %s.', base, high, step, label, base);
            END IF;
        END IF;
        IF base = '*' THEN
            ends := ARRAY[low, high];
        ELSIF strpos(base, '*') > 0 THEN
            RAISE EXCEPTION 'cron''s % field must be *, a value, a range a-b, or a step */s or a-b/s (or a list of these), got %',
                            label, quote_literal(element)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        ELSE
            bounds := string_to_array(base, '-');
            ends := '{}';
            FOREACH word IN ARRAY bounds LOOP
                v := NULL;
                IF word ~ '^[0-9]{1,4}$' THEN
                    v := word::integer;
                ELSIF field = 4 THEN
                    v := array_position(months, lower(word));
                ELSIF field = 5 THEN
                    v := array_position(days, lower(word)) - 1;
                END IF;
                IF v IS NULL OR v NOT BETWEEN low AND high THEN
                    RAISE EXCEPTION 'cron''s % field must hold values from % to %, got %', label, low,
                                    high || CASE WHEN field = 4 THEN ' or jan to dec' WHEN field = 5 THEN ' or sun to sat'
                                                 ELSE '' END,
                                    quote_literal(word)
                        USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
                END IF;
                ends := ends || v;
            END LOOP;
            IF cardinality(ends) = 1 THEN
                ends := ends || ends[1];
            END IF;
            IF ends[2] < ends[1] THEN
                RAISE EXCEPTION 'cron''s % field must have ranges from low to high, got %', label, quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
            END IF;
        END IF;
        FOR v IN ends[1]..ends[2] BY step LOOP
            allowed[v % CASE WHEN field = 5 THEN 7 ELSE 60 END + 1] := true;
        END LOOP;
    END LOOP;
    RETURN allowed;
END
$$;
COMMENT ON FUNCTION jobq._cron_field(text, text, integer) IS
    'Internal: the values one field of a cron expression allows; raises 22023 naming the field.';
REVOKE ALL ON FUNCTION jobq._cron_field(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_field(text, text, integer) TO @extowner@;

/*
 * jobq._cron_parse(cron): the expression as jobq._cron: for each field,
 * the next allowed value from each value (so that the walk jumps instead
 * of stepping), and the two rules that depend on how the fields are
 * written (days_or, fixed_time: see the top of this file).  Raises 22004
 * for NULL and 22023 for anything but five valid fields (separated by
 * spaces or tabs; @macros are not supported), naming the field, and for
 * an expression that can never match (a day of the month that none of
 * its months has, such as '0 0 30 2 *').
 */
CREATE FUNCTION jobq._cron_parse(cron text)
RETURNS jobq._cron
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts   text[];
    allowed boolean[];
    spec    jobq._cron;
    lengths constant integer[] := ARRAY[60, 24, 31, 12, 7];
    firsts  constant integer[] := ARRAY[0, 0, 1, 1, 0];
    nexts   integer[];
    nxt     integer;
    longest integer;
BEGIN
    IF cron IS NULL THEN
        RAISE EXCEPTION 'cron must not be NULL' USING ERRCODE = '22004';
    END IF;
    parts := regexp_split_to_array(btrim(cron, E' \t'), E'[ \t]+');
    IF cardinality(parts) <> 5 OR btrim(cron, E' \t') = '' THEN
        RAISE EXCEPTION 'cron must have five fields (minute hour day-of-month month day-of-week), got %',
                        quote_literal(left(cron, 200))
            USING ERRCODE = '22023',
                  HINT = 'Macros such as @daily and a field of seconds are not supported: write ''0 0 * * *''.';
    END IF;
    FOR field IN 1..5 LOOP
        allowed := jobq._cron_field(cron, parts[field], field);
        nexts := array_fill(NULL::integer, ARRAY[lengths[field]]);
        IF field = 5 THEN
            FOR w IN 0..6 LOOP
                FOR k IN 0..6 LOOP
                    IF allowed[(w + k) % 7 + 1] THEN
                        nexts[w + 1] := k;
                        EXIT;
                    END IF;
                END LOOP;
            END LOOP;
        ELSE
            nxt := NULL;
            FOR i IN REVERSE lengths[field] - 1 + firsts[field]..firsts[field] LOOP
                IF allowed[i + 1] THEN
                    nxt := i;
                END IF;
                nexts[i - firsts[field] + 1] := nxt;
            END LOOP;
        END IF;
        IF field = 1 THEN spec.minute_next := nexts;
        ELSIF field = 2 THEN spec.hour_next := nexts;
        ELSIF field = 3 THEN spec.dom_next := nexts;
        ELSIF field = 4 THEN spec.month_next := nexts;
        ELSE spec.dow_gap := nexts;
        END IF;
    END LOOP;
    spec.days_or := left(parts[3], 1) <> '*' AND left(parts[5], 1) <> '*';
    spec.fixed_time := left(parts[1], 1) <> '*' AND left(parts[2], 1) <> '*';
    IF NOT spec.days_or THEN
        -- both day fields must match: some allowed day must exist in some allowed month (29 in February)
        longest := 0;
        FOR m IN 1..12 LOOP
            IF spec.month_next[m] = m THEN
                longest := greatest(longest, CASE WHEN m = 2 THEN 29 WHEN m = ANY (ARRAY[4, 6, 9, 11]) THEN 30
                                                  ELSE 31 END);
            END IF;
        END LOOP;
        IF spec.dom_next[1] > longest THEN
            RAISE EXCEPTION 'cron can never match: no month of its month field (%) has the day % of its day-of-month field',
                            parts[4], spec.dom_next[1]
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        END IF;
    END IF;
    RETURN spec;
END
$$;
COMMENT ON FUNCTION jobq._cron_parse(text) IS
    'Internal: parse a five-field cron expression; raises 22023 naming the bad field, or for an expression that never matches.';
REVOKE ALL ON FUNCTION jobq._cron_parse(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_parse(text) TO @extowner@;

/*
 * jobq._cron_day(spec, day): the first day on or after day (a local date)
 * whose month and day match spec.  Jumps over months, and within a month
 * from one allowed day of the month or week to the next.  Raises XX000
 * if none comes within 400 years (jobq._cron_parse refuses the
 * expressions that never match, so it does not happen).
 */
CREATE FUNCTION jobq._cron_day(spec jobq._cron, day date)
RETURNS date
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    y        integer := date_part('year', day)::integer;
    m        integer := date_part('month', day)::integer;
    d        integer := date_part('day', day)::integer;
    last_y   integer := y + 400;
    dim      integer;
    dom      integer;
    yy       integer;
    dow      integer;
    gap      integer;
    offsets  constant integer[] := ARRAY[0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];  -- Sakamoto's weekday method
BEGIN
    WHILE y <= last_y LOOP
        IF spec.month_next[m] IS NULL THEN
            y := y + 1; m := spec.month_next[1]; d := 1;
            CONTINUE;
        ELSIF spec.month_next[m] <> m THEN
            m := spec.month_next[m]; d := 1;
        END IF;
        dim := CASE WHEN m = 2 THEN CASE WHEN y % 4 = 0 AND (y % 100 <> 0 OR y % 400 = 0) THEN 29 ELSE 28 END
                    WHEN m = ANY (ARRAY[4, 6, 9, 11]) THEN 30 ELSE 31 END;
        LOOP
            EXIT WHEN d > dim;
            dom := spec.dom_next[d];
            yy := CASE WHEN m < 3 THEN y - 1 ELSE y END;
            dow := (yy + yy / 4 - yy / 100 + yy / 400 + offsets[m] + d) % 7;
            gap := spec.dow_gap[dow + 1];
            IF spec.days_or THEN
                d := least(dom, d + gap);
                EXIT;
            END IF;
            IF dom IS NULL THEN
                d := NULL;
                EXIT;
            END IF;
            IF dom = d AND gap = 0 THEN
                EXIT;
            END IF;
            d := greatest(dom, d + gap);
        END LOOP;
        IF d IS NOT NULL AND d <= dim THEN
            RETURN make_date(y, m, d);
        END IF;
        d := 1;
        IF m = 12 THEN
            y := y + 1; m := 1;
        ELSE
            m := m + 1;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'no day matches the cron expression within 400 years' USING ERRCODE = 'XX000';
END
$$;
COMMENT ON FUNCTION jobq._cron_day(jobq._cron, date) IS 'Internal: the first date on or after day that the cron expression''s day and month fields match.';
REVOKE ALL ON FUNCTION jobq._cron_day(jobq._cron, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_day(jobq._cron, date) TO @extowner@;

/*
 * jobq._cron_time(spec, minute): the first minute of the day (0 to 1439)
 * at or after minute that the hour and minute fields allow; NULL for none.
 */
CREATE FUNCTION jobq._cron_time(spec jobq._cron, minute integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h  integer := _cron_time.minute / 60;
    mi integer := _cron_time.minute % 60;
    h2 integer;
BEGIN
    IF h > 23 THEN
        RETURN NULL;
    END IF;
    h2 := spec.hour_next[h + 1];
    IF h2 = h THEN
        IF spec.minute_next[mi + 1] IS NOT NULL THEN
            RETURN h * 60 + spec.minute_next[mi + 1];
        END IF;
        IF h = 23 THEN
            RETURN NULL;
        END IF;
        h2 := spec.hour_next[h + 2];
    END IF;
    RETURN h2 * 60 + spec.minute_next[1];  -- NULL when no hour is left
END
$$;
COMMENT ON FUNCTION jobq._cron_time(jobq._cron, integer) IS 'Internal: the first allowed minute of the day at or after the given one, or NULL.';
REVOKE ALL ON FUNCTION jobq._cron_time(jobq._cron, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_time(jobq._cron, integer) TO @extowner@;

/*
 * jobq._cron_walk(spec, timezone, after): the first occurrence of spec
 * strictly after after, by the rules at the top of this file, in the
 * (valid) time zone timezone.  Walks day by day over the days that match
 * (jobq._cron_day jumps to them) and, in each, jumps to the first allowed
 * minute.  A day's UTC offsets come from two probes around it; when they
 * differ, a binary search (to the second) finds the transition T, and the
 * day is two stretches: before T at the old offset, from T at the new one.
 * With fixed_time, a wall-clock time in neither stretch (skipped) runs at
 * T, and one in both (repeated) at its first pass; an occurrence at or
 * before after (in the second pass of a repeated hour) is passed over.
 * Assumes at most one transition within 52 hours (true of tzdata's zones).
 */
CREATE FUNCTION jobq._cron_walk(spec jobq._cron, timezone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tz        text := _cron_walk.timezone;
    local_x   timestamp := after AT TIME ZONE tz;
    low_wall  timestamp := date_trunc('minute', local_x) + interval '1 minute';  -- fixed_time: walls from here
    on_day       date;
    next_day  timestamp;
    probe_a   timestamptz;
    probe_b   timestamptz;
    off1      interval;
    off2      interval;
    lo        timestamptz;
    hi        timestamptz;
    mid       timestamptz;
    t_change  timestamptz;  -- the transition within reach of the day, or NULL
    seg_start timestamp;
    seg_end   timestamp;
    seg_off   interval;
    from_wall timestamp;
    tod       integer;
    wall      timestamp;
    instant   timestamptz;
BEGIN
    IF spec.fixed_time THEN
        on_day := low_wall::date;
    ELSE
        -- the local date of after, or the day before (a fall-back across
        -- midnight repeats walls of the previous date)
        on_day := ((after - interval '3 hours') AT TIME ZONE tz)::date;
    END IF;
    FOR round IN 1..1000 LOOP
        on_day := jobq._cron_day(spec, on_day);
        next_day := (on_day + 1)::timestamp;
        -- the day's offsets: probes 15 hours before its first and 13 after its last wall time (as UTC)
        probe_a := (on_day::timestamp - interval '15 hours') AT TIME ZONE 'UTC';
        probe_b := (next_day + interval '13 hours') AT TIME ZONE 'UTC';
        off1 := (probe_a AT TIME ZONE tz) - (probe_a AT TIME ZONE 'UTC');
        off2 := (probe_b AT TIME ZONE tz) - (probe_b AT TIME ZONE 'UTC');
        t_change := NULL;
        IF off1 <> off2 THEN
            lo := probe_a;
            hi := probe_b;
            WHILE hi - lo > interval '1 second' LOOP
                mid := to_timestamp(floor((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                IF (mid AT TIME ZONE tz) - (mid AT TIME ZONE 'UTC') = off1 THEN
                    lo := mid;
                ELSE
                    hi := mid;
                END IF;
            END LOOP;
            t_change := hi;
        END IF;

        IF spec.fixed_time THEN
            tod := CASE WHEN on_day = low_wall::date
                        THEN (date_part('hour', low_wall) * 60 + date_part('minute', low_wall))::integer ELSE 0 END;
            LOOP
                tod := jobq._cron_time(spec, tod);
                EXIT WHEN tod IS NULL;
                wall := on_day + make_interval(mins => tod);
                IF t_change IS NULL THEN
                    instant := (wall - off1) AT TIME ZONE 'UTC';
                ELSIF wall < (t_change AT TIME ZONE 'UTC') + off1 THEN
                    instant := (wall - off1) AT TIME ZONE 'UTC';  -- before the change, or its first pass
                ELSIF wall >= (t_change AT TIME ZONE 'UTC') + off2 THEN
                    instant := (wall - off2) AT TIME ZONE 'UTC';
                ELSE
                    instant := t_change;  -- skipped: at the end of the gap
                END IF;
                IF instant > after THEN
                    RETURN instant;
                END IF;
                tod := tod + 1;
            END LOOP;
        ELSE
            FOR stretch IN 1..CASE WHEN t_change IS NULL THEN 1 ELSE 2 END LOOP
                IF t_change IS NULL THEN
                    seg_start := on_day::timestamp; seg_end := next_day; seg_off := off1;
                ELSIF stretch = 1 THEN
                    seg_start := on_day::timestamp; seg_end := least(next_day, (t_change AT TIME ZONE 'UTC') + off1); seg_off := off1;
                ELSE
                    seg_start := greatest(on_day::timestamp, (t_change AT TIME ZONE 'UTC') + off2); seg_end := next_day;
                    seg_off := off2;
                END IF;
                from_wall := greatest(seg_start, date_trunc('minute', (after AT TIME ZONE 'UTC') + seg_off)
                                                 + interval '1 minute');
                CONTINUE WHEN from_wall >= seg_end;
                tod := jobq._cron_time(spec, (date_part('hour', from_wall) * 60
                                              + date_part('minute', from_wall))::integer);
                CONTINUE WHEN tod IS NULL;
                wall := on_day + make_interval(mins => tod);
                IF wall < seg_end THEN
                    RETURN (wall - seg_off) AT TIME ZONE 'UTC';
                END IF;
            END LOOP;
        END IF;
        on_day := on_day + 1;
    END LOOP;
    RAISE EXCEPTION 'no occurrence of the cron expression found' USING ERRCODE = 'XX000';
END
$$;
COMMENT ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) IS
    'Internal: the first occurrence of a parsed cron expression strictly after a time, in a time zone, DST handled as cron does.';
REVOKE ALL ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) TO @extowner@;

/*
 * jobq._check_timezone(timezone, canonical): returns nothing; raises 22004
 * for NULL, 22023 for a name PostgreSQL does not know (canonical: one not in
 * pg_timezone_names, spelled as there, so that abbreviations and POSIX
 * strings such as 'UTC+3' are refused too; reading that view takes tens
 * of milliseconds, so only jobq.schedule asks for it).
 */
CREATE FUNCTION jobq._check_timezone(timezone text, canonical boolean)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_timezone.timezone IS NULL THEN
        RAISE EXCEPTION 'timezone must not be NULL' USING ERRCODE = '22004';
    END IF;
    BEGIN
        PERFORM now() AT TIME ZONE _check_timezone.timezone;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'timezone must name a time zone (pg_timezone_names), got %',
                        quote_literal(left(_check_timezone.timezone, 80))
            USING ERRCODE = '22023', HINT = 'For example ''UTC'' or ''Europe/Berlin''.';
    END;
    IF _check_timezone.canonical
       AND NOT EXISTS (SELECT FROM pg_timezone_names AS z WHERE z.name = _check_timezone.timezone) THEN
        RAISE EXCEPTION 'timezone must name a time zone (pg_timezone_names), got %',
                        quote_literal(left(_check_timezone.timezone, 80))
            USING ERRCODE = '22023', HINT = 'For example ''UTC'' or ''Europe/Berlin''; abbreviations and offsets are refused.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_timezone(text, boolean) IS 'Internal: raises 22004/22023 unless timezone names a time zone.';
REVOKE ALL ON FUNCTION jobq._check_timezone(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_timezone(text, boolean) TO @extowner@;

/*
 * jobq._cron_next(cron, timezone, after): the first occurrence of cron
 * strictly after after, evaluated on the wall clock of timezone, DST as
 * described at the top of this file (the rule of Debian's cron and of
 * cronsim: a specific time skipped by a spring-forward runs at the end of
 * the gap, one repeated by a fall-back runs at its first pass; other
 * expressions match real instants only).  Raises 22004 (NULL argument),
 * 22023 (bad cron, naming the field; an expression that never matches; an
 * unknown timezone; after infinite).
 */
CREATE FUNCTION jobq._cron_next(cron text, timezone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec jobq._cron := jobq._cron_parse(_cron_next.cron);
BEGIN
    PERFORM jobq._check_timezone(_cron_next.timezone, false);
    IF _cron_next.after IS NULL THEN
        RAISE EXCEPTION 'after must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT isfinite(_cron_next.after) THEN
        RAISE EXCEPTION 'after must be finite, got %', _cron_next.after USING ERRCODE = '22023';
    END IF;
    RETURN jobq._cron_walk(spec, _cron_next.timezone, _cron_next.after);
END
$$;
COMMENT ON FUNCTION jobq._cron_next(text, text, timestamptz) IS
    'Internal: the first occurrence of a cron expression strictly after a time, in a time zone (DST as Debian''s cron and cronsim).';
REVOKE ALL ON FUNCTION jobq._cron_next(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_next(text, text, timestamptz) TO @extowner@;

/*
 * jobq._every_next(every, after): the first multiple of every since the
 * Unix epoch strictly after after.  every is checked by the caller (whole
 * seconds, 1 second to 366 days).
 */
CREATE FUNCTION jobq._every_next(every interval, after timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp(((floor(extract(epoch FROM _every_next.after)::numeric
                                / extract(epoch FROM _every_next.every)::numeric) + 1)
                         * extract(epoch FROM _every_next.every)::numeric)::double precision)
$$;
COMMENT ON FUNCTION jobq._every_next(interval, timestamptz) IS 'Internal: the first multiple of a period since the epoch strictly after a time.';
REVOKE ALL ON FUNCTION jobq._every_next(interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._every_next(interval, timestamptz) TO @extowner@;

----------------------------------------------------------------------------
-- The schedules table and view
----------------------------------------------------------------------------

CREATE TABLE jobq.schedule_settings (
    name         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    cron         text,
    timezone     text        NOT NULL,
    every        interval,
    priority     integer     NOT NULL,
    max_attempts integer,
    headers      jsonb,
    catch_up     text        NOT NULL,
    next_at      timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    task         text,  -- 0.9.0
    CONSTRAINT schedule_settings_pkey PRIMARY KEY (name)
);
-- Serves jobq.tick: the schedules due, one probe when none is.
CREATE INDEX schedule_settings_next_idx ON jobq.schedule_settings (next_at);
COMMENT ON INDEX jobq.schedule_settings_next_idx IS 'Serves jobq.tick: the schedules by their next occurrence not yet enqueued.';
COMMENT ON TABLE jobq.schedule_settings IS
    'One row per schedule (jobq.schedule, jobq.unschedule); jobq.tick enqueues its occurrences. Read it through the view jobq.schedules.';
COMMENT ON COLUMN jobq.schedule_settings.name IS 'The schedule''s name: 1 to 200 characters.';
COMMENT ON COLUMN jobq.schedule_settings.queue IS 'The queue its jobs go to.';
COMMENT ON COLUMN jobq.schedule_settings.payload IS 'The payload of each of its jobs.';
COMMENT ON COLUMN jobq.schedule_settings.cron IS 'A five-field cron expression, evaluated in timezone; NULL when every is set.';
COMMENT ON COLUMN jobq.schedule_settings.timezone IS 'The time zone of cron (a name of pg_timezone_names).';
COMMENT ON COLUMN jobq.schedule_settings.every IS 'A period (1 second to 366 days): occurrences at its multiples since the Unix epoch; NULL when cron is set.';
COMMENT ON COLUMN jobq.schedule_settings.priority IS 'The priority of its jobs.';
COMMENT ON COLUMN jobq.schedule_settings.max_attempts IS 'The max_attempts of its jobs; NULL: the queue''s.';
COMMENT ON COLUMN jobq.schedule_settings.headers IS 'Headers of its jobs, to which each job adds "schedule" (the name) and "occurrence" (its time).';
COMMENT ON COLUMN jobq.schedule_settings.catch_up IS 'What a tick does with occurrences missed by more than a minute: latest (enqueue the most recent, to run now), all (every one, up to 1,000 a tick), skip.';
COMMENT ON COLUMN jobq.schedule_settings.next_at IS 'The first occurrence not yet enqueued.';
COMMENT ON COLUMN jobq.schedule_settings.created_at IS 'When the schedule was first created.';
COMMENT ON COLUMN jobq.schedule_settings.updated_at IS 'When it was last created or replaced.';
COMMENT ON COLUMN jobq.schedule_settings.task IS 'The task of its jobs (the job type a worker dispatches on); NULL: plain jobs.';

-- pg_dump keeps the schedules, like the jobs.
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule_settings', '');

REVOKE ALL ON TABLE jobq.schedule_settings FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.schedule_settings TO @extowner@;

/*
 * jobq._schedule_next(cron, timezone, every, after): the schedule's first
 * occurrence strictly after after (by cron in timezone, or every).
 */
CREATE FUNCTION jobq._schedule_next(cron text, timezone text, every interval, after timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN _schedule_next.every IS NOT NULL THEN jobq._every_next(_schedule_next.every, _schedule_next.after)
                ELSE jobq._cron_walk(jobq._cron_parse(_schedule_next.cron), _schedule_next.timezone,
                                     _schedule_next.after) END
$$;
COMMENT ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) IS
    'Internal: a schedule''s first occurrence strictly after a time.';
REVOKE ALL ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) TO @extowner@;

CREATE VIEW jobq.schedules AS
SELECT s.name, s.queue, s.payload, s.cron, s.timezone, s.every, s.priority, s.max_attempts, s.headers,
       s.catch_up, jobq._schedule_next(s.cron, s.timezone, s.every, pg_catalog.now()) AS next_run,
       s.next_at, s.created_at, s.updated_at, s.task
  FROM jobq.schedule_settings AS s;
COMMENT ON VIEW jobq.schedules IS 'Every schedule, with its next occurrence after now().';
COMMENT ON COLUMN jobq.schedules.name IS 'The schedule''s name.';
COMMENT ON COLUMN jobq.schedules.queue IS 'The queue its jobs go to.';
COMMENT ON COLUMN jobq.schedules.payload IS 'The payload of each of its jobs.';
COMMENT ON COLUMN jobq.schedules.cron IS 'Its cron expression (NULL: every).';
COMMENT ON COLUMN jobq.schedules.timezone IS 'The time zone of cron.';
COMMENT ON COLUMN jobq.schedules.every IS 'Its period (NULL: cron).';
COMMENT ON COLUMN jobq.schedules.priority IS 'The priority of its jobs.';
COMMENT ON COLUMN jobq.schedules.max_attempts IS 'The max_attempts of its jobs (NULL: the queue''s).';
COMMENT ON COLUMN jobq.schedules.headers IS 'Headers of its jobs (each adds "schedule" and "occurrence").';
COMMENT ON COLUMN jobq.schedules.catch_up IS 'latest, all or skip: what a tick does with missed occurrences.';
COMMENT ON COLUMN jobq.schedules.next_run IS 'Its next occurrence after now().';
COMMENT ON COLUMN jobq.schedules.next_at IS 'The first occurrence not yet enqueued (past: missed, caught up by the next tick).';
COMMENT ON COLUMN jobq.schedules.created_at IS 'When it was first created.';
COMMENT ON COLUMN jobq.schedules.updated_at IS 'When it was last created or replaced.';
COMMENT ON COLUMN jobq.schedules.task IS 'The task of its jobs (NULL: plain jobs).';
REVOKE ALL ON TABLE jobq.schedules FROM PUBLIC;
GRANT SELECT ON TABLE jobq.schedules TO @extowner@;

/*
 * jobq._cancel_occurrences(name, queue): how many jobs it cancelled: the
 * queued jobs of queue enqueued by the schedule name (its header
 * "schedule" and a unique key 'cron:<name>:...').  Locks them FOR NO KEY
 * UPDATE first, so that a job claimed meanwhile (running) is left alone,
 * then cancels them with jobq.cancel (which notifies their watchers).
 */
CREATE FUNCTION jobq._cancel_occurrences(name text, queue text)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prefix text := 'cron:' || _cancel_occurrences.name || ':';
    ids    bigint[];
BEGIN
    ids := ARRAY(SELECT j.id
                   FROM jobq.jobs AS j
                  WHERE j.queue = (SELECT _cancel_occurrences.queue) AND j.status = 'queued'
                    AND j.headers ->> 'schedule' = (SELECT _cancel_occurrences.name)
                    AND EXISTS (SELECT FROM jobq.unique_keys AS k
                                 WHERE k.job_id = j.id AND left(k.unique_key, length(prefix)) = prefix)
                  ORDER BY j.id
                    FOR NO KEY UPDATE OF j);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM jobq.cancel(ids);
    RETURN cardinality(ids);
END
$$;
COMMENT ON FUNCTION jobq._cancel_occurrences(text, text) IS
    'Internal: cancel the queued jobs a schedule enqueued in a queue (running ones finish).';
REVOKE ALL ON FUNCTION jobq._cancel_occurrences(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cancel_occurrences(text, text) TO @extowner@;

/*
 * jobq.schedule(name, queue, payload, cron, timezone, every, priority,
 * max_attempts, headers, catch_up, task): the schedule's row of
 * jobq.schedules (its task last).
 * Creates the schedule name, or replaces it: then the queued occurrences
 * of the old definition (not yet started: running ones finish) are
 * cancelled, and the new one starts afresh, its first occurrence the first
 * after now() (no catch-up at creation).  Exactly one of cron (five fields,
 * evaluated in timezone) and every (occurrences at the multiples of it
 * since the Unix epoch).  Each occurrence becomes a job of queue with
 * payload, priority, max_attempts, headers (plus "schedule": name and
 * "occurrence": its time) and task (0.9.0; NULL: plain jobs), enqueued by
 * jobq.tick.  Locks the schedule's row, and the queued jobs it cancels.
 * Raises 22004 (NULL name, queue, payload, timezone, priority or
 * catch_up), 22023 (name not 1 to 200 characters; bad queue name; payload
 * or headers not a JSON object; neither or both of cron and every; a bad
 * cron, naming the field, or one that never matches; an unknown timezone;
 * every not whole seconds from 1 second to 366 days, or with months;
 * priority or max_attempts out of range; catch_up not latest, all or skip;
 * a bad task name), 54000 (payload or headers over 1 MiB).
 */
CREATE FUNCTION jobq.schedule(
    name         text,
    queue        text,
    payload      jsonb    DEFAULT '{}',
    cron         text     DEFAULT NULL,
    timezone     text     DEFAULT 'UTC',
    every        interval DEFAULT NULL,
    priority     integer  DEFAULT 0,
    max_attempts integer  DEFAULT NULL,
    headers      jsonb    DEFAULT NULL,
    catch_up     text     DEFAULT 'latest',
    task         text     DEFAULT NULL)
RETURNS jobq.schedules
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_queue text;
    outcome   jobq.schedules;
BEGIN
    IF schedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(schedule.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'name must be 1 to 200 characters, got %', length(schedule.name) USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_queue(schedule.queue);
    PERFORM jobq._check_payload(schedule.payload, 'payload');
    IF (schedule.cron IS NULL) = (schedule.every IS NULL) THEN
        RAISE EXCEPTION 'exactly one of cron and every must be given, got %',
                        CASE WHEN schedule.cron IS NULL THEN 'neither' ELSE 'both' END
            USING ERRCODE = '22023';
    END IF;
    IF schedule.cron IS NOT NULL THEN
        PERFORM jobq._cron_parse(schedule.cron);
    END IF;
    PERFORM jobq._check_timezone(schedule.timezone, true);
    IF schedule.every IS NOT NULL
       AND (date_part('month', schedule.every) <> 0 OR date_part('year', schedule.every) <> 0
            OR extract(epoch FROM schedule.every) < 1 OR extract(epoch FROM schedule.every) > 366 * 86400
            OR extract(epoch FROM schedule.every) <> floor(extract(epoch FROM schedule.every))) THEN
        RAISE EXCEPTION 'every must be a whole number of seconds from 1 second to 366 days, without months, got %',
                        schedule.every
            USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_options(schedule.priority, now(), schedule.max_attempts);
    IF schedule.headers IS NOT NULL THEN
        PERFORM jobq._check_job_options(NULL, 'until_done', 'skip', schedule.headers);
        -- with what each job adds
        PERFORM jobq._check_payload(schedule.headers || jsonb_build_object('schedule', schedule.name,
                                                                           'occurrence', '2000-01-01T00:00:00Z'),
                                    'headers');
    END IF;
    IF schedule.catch_up IS NULL THEN
        RAISE EXCEPTION 'catch_up must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF schedule.catch_up <> ALL (ARRAY['latest', 'all', 'skip']) THEN
        RAISE EXCEPTION 'catch_up must be latest, all or skip, got %', quote_literal(left(schedule.catch_up, 80))
            USING ERRCODE = '22023';
    END IF;
    IF schedule.task IS NOT NULL THEN
        PERFORM jobq._check_task(schedule.task);
    END IF;

    SELECT s.queue INTO old_queue FROM jobq.schedule_settings AS s WHERE s.name = schedule.name FOR UPDATE;
    INSERT INTO jobq.schedule_settings AS s (name, queue, payload, cron, timezone, every, priority, max_attempts,
                                             headers, catch_up, next_at, task)
    VALUES (schedule.name, schedule.queue, schedule.payload, schedule.cron, schedule.timezone, schedule.every,
            schedule.priority, schedule.max_attempts, schedule.headers, schedule.catch_up,
            jobq._schedule_next(schedule.cron, schedule.timezone, schedule.every, now()), schedule.task)
    ON CONFLICT ON CONSTRAINT schedule_settings_pkey DO UPDATE
       SET queue = excluded.queue, payload = excluded.payload, cron = excluded.cron,
           timezone = excluded.timezone, every = excluded.every, priority = excluded.priority,
           max_attempts = excluded.max_attempts, headers = excluded.headers, catch_up = excluded.catch_up,
           next_at = excluded.next_at, updated_at = now(), task = excluded.task;
    -- the row is ours until the commit (ticks skip it): whatever is queued
    -- for the name now belongs to an older definition
    PERFORM jobq._cancel_occurrences(schedule.name, schedule.queue);
    IF old_queue IS DISTINCT FROM schedule.queue AND old_queue IS NOT NULL THEN
        PERFORM jobq._cancel_occurrences(schedule.name, old_queue);
    END IF;

    SELECT v.* INTO outcome FROM jobq.schedules AS v WHERE v.name = schedule.name;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) IS
    'Create or replace a schedule: a cron expression in a time zone, or a period (every); jobq.tick enqueues its occurrences as jobs of queue, with its payload, priority, max_attempts, headers and task. A replace cancels the old definition''s queued occurrences. Returns its row of jobq.schedules.';
REVOKE ALL ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) TO @extowner@;

/*
 * jobq.unschedule(name): true when the schedule existed.  Deletes it and
 * cancels its queued occurrences (running ones finish).  Locks its row
 * (waiting for a tick that holds it) and the jobs it cancels.  Raises
 * 22004 (NULL name).
 */
CREATE FUNCTION jobq.unschedule(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_queue text;
BEGIN
    IF unschedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.schedule_settings AS s WHERE s.name = unschedule.name RETURNING s.queue INTO old_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._cancel_occurrences(unschedule.name, old_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Delete a schedule and cancel its queued occurrences; false when there is no such schedule.';
REVOKE ALL ON FUNCTION jobq.unschedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.unschedule(text) TO @extowner@;

/*
 * jobq._enqueue_occurrence(schedule, occurrence, run_at): 1 when it
 * enqueued the occurrence as a job (with the schedule's payload, priority,
 * max_attempts, headers and task), 0 when a job of it exists already (its
 * unique key 'cron:<name>:<epoch seconds>', kept until done).  Locks and
 * raises what jobq.enqueue does.
 */
CREATE FUNCTION jobq._enqueue_occurrence(schedule jobq.schedule_settings, occurrence timestamptz, run_at timestamptz)
RETURNS integer
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN jobq.enqueue(
                   queue        => (_enqueue_occurrence.schedule).queue,
                   payload      => (_enqueue_occurrence.schedule).payload,
                   priority     => (_enqueue_occurrence.schedule).priority,
                   -- within enqueue's bounds (10 years of now) whatever the occurrence
                   run_at       => least(greatest(_enqueue_occurrence.run_at, now() - interval '3650 days'),
                                         now() + interval '3650 days'),
                   max_attempts => (_enqueue_occurrence.schedule).max_attempts,
                   unique_key   => 'cron:' || (_enqueue_occurrence.schedule).name || ':'
                                   || floor(extract(epoch FROM _enqueue_occurrence.occurrence))::bigint,
                   unique_scope => 'until_done',
                   on_conflict  => 'skip',
                   headers      => coalesce((_enqueue_occurrence.schedule).headers, '{}'::jsonb)
                                   || jsonb_build_object(
                                          'schedule', (_enqueue_occurrence.schedule).name,
                                          'occurrence', to_char(_enqueue_occurrence.occurrence AT TIME ZONE 'UTC',
                                                                'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                   task         => (_enqueue_occurrence.schedule).task)
                IS NULL THEN 0 ELSE 1 END
$$;
COMMENT ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) IS
    'Internal: enqueue one occurrence of a schedule as a unique job; 1 if enqueued, 0 if it was already.';
REVOKE ALL ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) TO @extowner@;

/*
 * jobq._tick(at): how many jobs it enqueued, as jobq.tick at the time at
 * (tests drive the clock through it; at must be within 10 years of now).
 * For each schedule whose next_at is at most at + 1 minute (the
 * lookahead), locked FOR UPDATE SKIP LOCKED (a schedule another tick or a
 * replace holds is left to it), enqueues each occurrence from next_at to
 * at + 1 minute as a job to run at its time, and moves next_at past them,
 * in the caller's transaction.  Occurrences more than a minute before at
 * are missed (no tick ran): catch_up 'latest' enqueues only the most
 * recent of them, to run at at; 'all' each of them, to run at its time (at
 * most 1,000 jobs per schedule per tick: the rest at the next tick);
 * 'skip' none.  Each job has the unique key 'cron:<name>:<epoch seconds>'
 * until done, so an occurrence is enqueued at most once even past the row
 * lock.  Raises what jobq.enqueue raises (40001 under contention).
 */
CREATE FUNCTION jobq._tick(at timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lookahead constant interval := interval '1 minute';
    s         jobq.schedule_settings;
    spec      jobq._cron;
    missed    timestamptz := _tick.at - lookahead;  -- occurrences before this were missed
    horizon   timestamptz := _tick.at + lookahead;
    n         timestamptz;
    lo        timestamptz;
    hi        timestamptz;
    probe     timestamptz;
    jobs      integer;
    enqueued  integer := 0;
BEGIN
    FOR s IN
        SELECT t.*
          FROM jobq.schedule_settings AS t
         WHERE t.next_at <= (SELECT horizon)
         ORDER BY t.next_at
           FOR UPDATE SKIP LOCKED
    LOOP
        spec := CASE WHEN s.cron IS NOT NULL THEN jobq._cron_parse(s.cron) END;
        n := s.next_at;
        jobs := 0;
        IF n < missed THEN
            IF s.catch_up = 'all' THEN
                WHILE n < missed AND jobs < 1000 LOOP
                    enqueued := enqueued + jobq._enqueue_occurrence(s, n, n);
                    jobs := jobs + 1;
                    n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, n)
                              ELSE jobq._cron_walk(spec, s.timezone, n) END;
                END LOOP;
            ELSE
                IF s.catch_up = 'latest' THEN
                    -- the last occurrence before missed, by bisection: lo is
                    -- always an occurrence before it, none lies in (hi, missed)
                    lo := n;
                    hi := missed;
                    LOOP
                        probe := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, lo)
                                      ELSE jobq._cron_walk(spec, s.timezone, lo) END;
                        EXIT WHEN probe >= missed;
                        probe := to_timestamp(((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                        probe := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, probe)
                                      ELSE jobq._cron_walk(spec, s.timezone, probe) END;
                        IF probe < missed THEN
                            lo := probe;
                        ELSE
                            hi := to_timestamp(((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                        END IF;
                    END LOOP;
                    enqueued := enqueued + jobq._enqueue_occurrence(s, lo, _tick.at);
                    jobs := jobs + 1;
                END IF;
                -- the first occurrence not missed
                n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, missed - interval '1 microsecond')
                          ELSE jobq._cron_walk(spec, s.timezone, missed - interval '1 microsecond') END;
            END IF;
        END IF;
        WHILE n <= horizon AND jobs < 1000 LOOP
            enqueued := enqueued + jobq._enqueue_occurrence(s, n, n);
            jobs := jobs + 1;
            n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, n)
                      ELSE jobq._cron_walk(spec, s.timezone, n) END;
        END LOOP;
        UPDATE jobq.schedule_settings AS t SET next_at = n WHERE t.name = s.name;
    END LOOP;
    RETURN enqueued;
END
$$;
COMMENT ON FUNCTION jobq._tick(timestamptz) IS
    'Internal: jobq.tick as at a given time: enqueue the occurrences due within a minute of it, catching up missed ones by each schedule''s catch_up.';
REVOKE ALL ON FUNCTION jobq._tick(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._tick(timestamptz) TO @extowner@;
