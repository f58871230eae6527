-- ddl 0
CREATE TABLE delayed_queue ( id BIGINT NOT NULL AUTO_INCREMENT, pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, payload LONGBLOB NOT NULL, scheduled_at BIGINT NOT NULL, scheduled_at_initially BIGINT NOT NULL, lock_uuid VARCHAR(36), created_at BIGINT NOT NULL, deliveries INTEGER NOT NULL, priority INTEGER NOT NULL DEFAULT 0, group_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, enqueued_by VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, claimed_by VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, trace_context VARCHAR(512), PRIMARY KEY (id) );

-- ddl 1
CREATE INDEX delayed_queue_kind_due_ix ON delayed_queue (pkind, scheduled_at, id);

-- ddl 2
CREATE INDEX delayed_queue_kind_group_ix ON delayed_queue (pkind, group_key, priority DESC, scheduled_at_initially, id);

-- ddl 3
CREATE UNIQUE INDEX delayed_queue_kind_key_uq ON delayed_queue (pkind, pkey);

-- ddl 4
CREATE INDEX delayed_queue_kind_lock_ix ON delayed_queue (pkind, lock_uuid);

-- ddl 5
CREATE INDEX delayed_queue_kind_prio_ix ON delayed_queue (pkind, priority DESC, scheduled_at, id);

-- ddl 6
CREATE TABLE delayed_queue_dead ( id BIGINT NOT NULL AUTO_INCREMENT, pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, payload LONGBLOB NOT NULL, scheduled_at_initially BIGINT NOT NULL, created_at BIGINT NOT NULL, attempts INTEGER NOT NULL, last_error VARCHAR(2000) CHARACTER SET utf8mb4, failed_at BIGINT NOT NULL, priority INTEGER NOT NULL DEFAULT 0, group_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, enqueued_by VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, PRIMARY KEY (id) );

-- ddl 7
CREATE INDEX delayed_queue_dead_key_ix ON delayed_queue_dead (pkind, pkey, failed_at, id);

-- ddl 8
CREATE INDEX delayed_queue_dead_kind_ix ON delayed_queue_dead (pkind, failed_at, id);

-- ddl 9
CREATE TABLE delayed_queue_groups ( pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, group_key VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, claimed_until BIGINT, lock_uuid VARCHAR(36), PRIMARY KEY (pkind, group_key) );

-- ddl 10
CREATE TABLE delayed_queue_settings ( pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, paused SMALLINT NOT NULL DEFAULT 0, has_groups SMALLINT NOT NULL DEFAULT 0, rate_limit INTEGER, rate_period_ms BIGINT, tokens_milli BIGINT, refilled_at BIGINT, max_in_flight INTEGER, PRIMARY KEY (pkind) );

-- ddl 11
CREATE TABLE delayed_queue_history ( id BIGINT NOT NULL AUTO_INCREMENT, pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, at BIGINT NOT NULL, kind VARCHAR(20) NOT NULL, actor VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, attempt INTEGER, detail VARCHAR(2000) CHARACTER SET utf8mb4, PRIMARY KEY (id) );

-- ddl 12
CREATE INDEX delayed_queue_history_key_ix ON delayed_queue_history (pkind, pkey, id);

-- ddl 13
CREATE INDEX delayed_queue_history_kind_at_ix ON delayed_queue_history (pkind, at);

-- ddl 14
CREATE TABLE delayed_queue_results ( pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, task VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL, status VARCHAR(20) NOT NULL, payload LONGBLOB NOT NULL, return_value LONGBLOB, attempts INTEGER NOT NULL, worker VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin, created_at BIGINT NOT NULL, started_at BIGINT NOT NULL, finished_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (pkind, pkey) );

-- ddl 15
CREATE INDEX delayed_queue_results_kind_expiry_ix ON delayed_queue_results (pkind, expires_at);

-- offer 0
SELECT delayed_queue.id FROM delayed_queue FORCE INDEX (delayed_queue_kind_key_uq) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.pkey IN (:keys_1, :keys_2, :keys_3);

-- offer 1
SELECT delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at_initially, delayed_queue.priority, delayed_queue.group_key, delayed_queue.id FROM delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.id IN (:ids_1, :ids_2) ORDER BY delayed_queue.id FOR UPDATE;

-- offer 2
SELECT delayed_queue.id FROM delayed_queue FORCE INDEX (delayed_queue_kind_key_uq) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.pkey IN (:keys_1);

-- offer 3
INSERT INTO delayed_queue (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, created_at, deliveries, priority, group_key) VALUES (:b_kind, :k_0, :p_0, :a_0, :a_0, NULL, :created, 0, :r_0, :g_0);

-- offer 4
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET payload=CASE delayed_queue.id WHEN :i_0 THEN :p_0 END, scheduled_at=CASE delayed_queue.id WHEN :i_0 THEN :a_0 END, scheduled_at_initially=CASE delayed_queue.id WHEN :i_0 THEN :a_0 END, lock_uuid=NULL, created_at=:created, deliveries=0, priority=CASE delayed_queue.id WHEN :i_0 THEN :r_0 END, group_key=CASE delayed_queue.id WHEN :i_0 THEN :g_0 END WHERE delayed_queue.pkind = :b_kind AND delayed_queue.id IN (:i_0);

-- insert first 0
INSERT INTO delayed_queue (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, created_at, deliveries, priority, group_key) VALUES (:b_kind, :k_0, :p_0, :a_0, :a_0, NULL, :created, 0, :r_0, :g_0);

-- claim 0
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.rate_limit IS NOT NULL OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- claim 1
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- claim acking 0
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1, :ids_2);

-- claim acking 1
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1);

-- claim acking 2
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.rate_limit IS NOT NULL OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- claim acking 3
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- claim recorded 0
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.rate_limit IS NOT NULL OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- claim recorded 1
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1), claimed_by=:actor WHERE delayed_queue.id IN (:ids_1);

-- ack 0
DELETE FROM delayed_queue WHERE delayed_queue.id = :id AND delayed_queue.lock_uuid = :lock;

-- ack_many 0
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1, :ids_2);

-- ack retried 0
SELECT keyed.id FROM delayed_queue AS held FORCE INDEX (PRIMARY) INNER JOIN delayed_queue AS keyed FORCE INDEX (delayed_queue_kind_key_uq) ON keyed.pkind = held.pkind AND keyed.pkey = held.pkey WHERE held.id IN (:ids_1) FOR UPDATE NOWAIT;

-- ack retried 1
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1);

-- ack_many retried 0
SELECT keyed.id FROM delayed_queue AS held FORCE INDEX (PRIMARY) INNER JOIN delayed_queue AS keyed FORCE INDEX (delayed_queue_kind_key_uq) ON keyed.pkind = held.pkind AND keyed.pkey = held.pkey WHERE held.id IN (:ids_1, :ids_2) FOR UPDATE NOWAIT;

-- ack_many retried 1
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1, :ids_2);

-- lock_acked 0
SELECT delayed_queue.id, delayed_queue.lock_uuid FROM delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.id IN (:ids_1, :ids_2) ORDER BY delayed_queue.id FOR UPDATE;

-- trace context 0
UPDATE delayed_queue SET trace_context=:trace_context WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey IN (:pkey_1_1, :pkey_1_2);

-- controlled claim 0
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.rate_limit IS NOT NULL OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- controlled claim 1
SELECT delayed_queue_settings.paused, delayed_queue_settings.has_groups, delayed_queue_settings.rate_limit, delayed_queue_settings.rate_period_ms, delayed_queue_settings.tokens_milli, delayed_queue_settings.refilled_at, delayed_queue_settings.max_in_flight FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind;

-- controlled claim 2
SELECT delayed_queue_settings.paused, delayed_queue_settings.has_groups, delayed_queue_settings.rate_limit, delayed_queue_settings.rate_period_ms, delayed_queue_settings.tokens_milli, delayed_queue_settings.refilled_at, delayed_queue_settings.max_in_flight FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind FOR UPDATE;

-- controlled claim 3
SELECT count(*) AS count_1 FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.lock_uuid IS NOT NULL AND delayed_queue.scheduled_at > :scheduled_at_1 LOCK IN SHARE MODE;

-- controlled claim 4
SELECT delayed_queue.group_key, CASE WHEN (EXISTS (SELECT 1 FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = delayed_queue.pkind AND delayed_queue_groups.group_key = delayed_queue.group_key)) THEN 1 ELSE 0 END AS known FROM delayed_queue WHERE NOT (EXISTS (SELECT 1 FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = delayed_queue.pkind AND delayed_queue_groups.group_key = delayed_queue.group_key AND delayed_queue_groups.claimed_until > :b_now)) AND delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :walk;

-- controlled claim 5
SELECT delayed_queue_groups.group_key FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = :pkind_1 AND delayed_queue_groups.group_key IN (:group_key_1_1);

-- controlled claim 6
INSERT INTO delayed_queue_groups (pkind, group_key) VALUES (:pkind, :group_key) ON DUPLICATE KEY UPDATE pkind = delayed_queue_groups.pkind;

-- controlled claim 7
SELECT delayed_queue_groups.group_key FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1) AND (delayed_queue_groups.claimed_until IS NULL OR delayed_queue_groups.claimed_until <= :b_now) ORDER BY delayed_queue_groups.group_key FOR UPDATE SKIP LOCKED;

-- controlled claim 8
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT (SELECT delayed_queue.id FROM delayed_queue FORCE INDEX (delayed_queue_kind_group_ix) WHERE delayed_queue.pkind = delayed_queue_groups.pkind AND delayed_queue.group_key = delayed_queue_groups.group_key AND delayed_queue.scheduled_at <= :b_now ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at_initially, delayed_queue.id LIMIT :param_1) AS id, delayed_queue_groups.group_key AS group_key FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1) LIMIT :count) AS heads INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = heads.id WHERE delayed_queue.group_key = heads.group_key AND delayed_queue.scheduled_at <= :b_now FOR UPDATE SKIP LOCKED;

-- controlled claim 9
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_group_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND delayed_queue.group_key IS NULL ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now AND delayed_queue.group_key IS NULL LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- controlled claim 10
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- controlled claim 11
UPDATE delayed_queue_groups SET claimed_until=:until, lock_uuid=:lock WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1);

-- controlled claim 12
UPDATE delayed_queue_settings SET tokens_milli=:tokens_milli, refilled_at=:refilled_at WHERE delayed_queue_settings.pkind = :pkind_1;

-- rate-limited claim 0
SELECT delayed_queue_settings.paused, delayed_queue_settings.has_groups, delayed_queue_settings.rate_limit, delayed_queue_settings.rate_period_ms, delayed_queue_settings.tokens_milli, delayed_queue_settings.refilled_at, delayed_queue_settings.max_in_flight FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind;

-- rate-limited claim 1
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- rate-limited claim 2
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- rate-limited claim 3
UPDATE delayed_queue_settings SET tokens_milli=(CASE WHEN (delayed_queue_settings.tokens_milli IS NULL OR delayed_queue_settings.refilled_at IS NULL OR :b_now - delayed_queue_settings.refilled_at >= delayed_queue_settings.rate_period_ms) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 WHEN (:b_now - delayed_queue_settings.refilled_at <= :param_2) THEN delayed_queue_settings.tokens_milli WHEN (delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) > CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 ELSE delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) END - :spend), refilled_at=CASE WHEN (delayed_queue_settings.refilled_at IS NULL OR :b_now > delayed_queue_settings.refilled_at) THEN :b_now ELSE delayed_queue_settings.refilled_at END WHERE delayed_queue_settings.pkind = :b_kind AND delayed_queue_settings.rate_limit IS NOT NULL AND CASE WHEN (delayed_queue_settings.tokens_milli IS NULL OR delayed_queue_settings.refilled_at IS NULL OR :b_now - delayed_queue_settings.refilled_at >= delayed_queue_settings.rate_period_ms) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 WHEN (:b_now - delayed_queue_settings.refilled_at <= :param_2) THEN delayed_queue_settings.tokens_milli WHEN (delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) > CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 ELSE delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) END >= :spend;

-- claim on credit 0
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- claim on credit 1
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- claim on credit 2
UPDATE delayed_queue_settings SET tokens_milli=(CASE WHEN (delayed_queue_settings.tokens_milli IS NULL OR delayed_queue_settings.refilled_at IS NULL OR :b_now - delayed_queue_settings.refilled_at >= delayed_queue_settings.rate_period_ms) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 WHEN (:b_now - delayed_queue_settings.refilled_at <= :param_2) THEN delayed_queue_settings.tokens_milli WHEN (delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) > CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 ELSE delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) END - :spend), refilled_at=CASE WHEN (delayed_queue_settings.refilled_at IS NULL OR :b_now > delayed_queue_settings.refilled_at) THEN :b_now ELSE delayed_queue_settings.refilled_at END WHERE delayed_queue_settings.pkind = :b_kind AND delayed_queue_settings.rate_limit IS NOT NULL AND CASE WHEN (delayed_queue_settings.tokens_milli IS NULL OR delayed_queue_settings.refilled_at IS NULL OR :b_now - delayed_queue_settings.refilled_at >= delayed_queue_settings.rate_period_ms) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 WHEN (:b_now - delayed_queue_settings.refilled_at <= :param_2) THEN delayed_queue_settings.tokens_milli WHEN (delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) > CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) THEN CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1 ELSE delayed_queue_settings.tokens_milli + FLOOR(((:b_now - delayed_queue_settings.refilled_at) * CAST(delayed_queue_settings.rate_limit AS SIGNED INTEGER) * :param_1) / delayed_queue_settings.rate_period_ms) END >= :spend;

-- ack freeing groups 0
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1, :ids_2);

-- ack freeing groups 1
UPDATE delayed_queue_groups SET claimed_until=:claimed_until, lock_uuid=:lock_uuid WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1, :names_2) AND delayed_queue_groups.lock_uuid = :lock;

-- ack freeing groups 2
DELETE FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1, :names_2) AND delayed_queue_groups.claimed_until IS NULL AND NOT (EXISTS (SELECT 1 FROM delayed_queue FORCE INDEX (delayed_queue_kind_group_ix) WHERE delayed_queue.pkind = delayed_queue_groups.pkind AND delayed_queue.group_key = delayed_queue_groups.group_key));

-- free groups 0
UPDATE delayed_queue_groups SET claimed_until=:claimed_until, lock_uuid=:lock_uuid WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1, :names_2) AND delayed_queue_groups.lock_uuid = :lock;

-- free groups 1
DELETE FROM delayed_queue_groups WHERE delayed_queue_groups.pkind = :b_kind AND delayed_queue_groups.group_key IN (:names_1, :names_2) AND delayed_queue_groups.claimed_until IS NULL AND NOT (EXISTS (SELECT 1 FROM delayed_queue FORCE INDEX (delayed_queue_kind_group_ix) WHERE delayed_queue.pkind = delayed_queue_groups.pkind AND delayed_queue.group_key = delayed_queue_groups.group_key));

-- extend group 0
UPDATE delayed_queue_groups SET claimed_until=:claimed_until WHERE delayed_queue_groups.pkind = :pkind_1 AND delayed_queue_groups.group_key = :group_key_1 AND delayed_queue_groups.lock_uuid = :lock_uuid_1;

-- settings 0
SELECT delayed_queue_settings.pkind FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :pkind_1;

-- settings 1
INSERT INTO delayed_queue_settings (pkind) VALUES (:pkind) ON DUPLICATE KEY UPDATE pkind = delayed_queue_settings.pkind;

-- settings 2
UPDATE delayed_queue_settings SET paused=:paused WHERE delayed_queue_settings.pkind = :pkind_1;

-- rate limit 0
SELECT delayed_queue_settings.pkind FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :pkind_1;

-- rate limit 1
INSERT INTO delayed_queue_settings (pkind) VALUES (:pkind) ON DUPLICATE KEY UPDATE pkind = delayed_queue_settings.pkind;

-- rate limit 2
UPDATE delayed_queue_settings SET rate_limit=:rate_limit, rate_period_ms=:rate_period_ms, tokens_milli=:tokens_milli, refilled_at=:refilled_at WHERE delayed_queue_settings.pkind = :pkind_1 AND (delayed_queue_settings.rate_limit IS NULL OR delayed_queue_settings.rate_limit != :rate_limit_1 OR delayed_queue_settings.rate_period_ms IS NULL OR delayed_queue_settings.rate_period_ms != :rate_period_ms_1);

-- settings of queues 0
SELECT delayed_queue_settings.paused, delayed_queue_settings.has_groups, delayed_queue_settings.rate_limit, delayed_queue_settings.rate_period_ms, delayed_queue_settings.tokens_milli, delayed_queue_settings.refilled_at, delayed_queue_settings.max_in_flight, delayed_queue_settings.pkind FROM delayed_queue_settings WHERE delayed_queue_settings.pkind IN (:pkind_1_1, :pkind_1_2);

-- settings of every queue 0
SELECT delayed_queue_settings.paused, delayed_queue_settings.has_groups, delayed_queue_settings.rate_limit, delayed_queue_settings.rate_period_ms, delayed_queue_settings.tokens_milli, delayed_queue_settings.refilled_at, delayed_queue_settings.max_in_flight, delayed_queue_settings.pkind FROM delayed_queue_settings;

-- offer by 0
SELECT delayed_queue.id FROM delayed_queue FORCE INDEX (delayed_queue_kind_key_uq) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.pkey IN (:keys_1);

-- offer by 1
INSERT INTO delayed_queue (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, created_at, deliveries, priority, group_key, enqueued_by) VALUES (:b_kind, :k_0, :p_0, :a_0, :a_0, NULL, :created, 0, :r_0, :g_0, :actor);

-- claim by 0
SELECT STRAIGHT_JOIN delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.lock_uuid, delayed_queue.claimed_by, delayed_queue.trace_context FROM (SELECT delayed_queue.id AS id FROM delayed_queue FORCE INDEX (delayed_queue_kind_prio_ix) WHERE delayed_queue.pkind = :b_kind AND delayed_queue.scheduled_at <= :b_now AND NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :b_kind AND (delayed_queue_settings.paused != 0 OR delayed_queue_settings.has_groups != 0 OR delayed_queue_settings.rate_limit IS NOT NULL OR delayed_queue_settings.max_in_flight IS NOT NULL))) ORDER BY delayed_queue.priority DESC, delayed_queue.scheduled_at, delayed_queue.id LIMIT :b_walk) AS due INNER JOIN delayed_queue FORCE INDEX (PRIMARY) ON delayed_queue.id = due.id WHERE delayed_queue.scheduled_at <= :b_now LIMIT :b_limit FOR UPDATE SKIP LOCKED;

-- claim by 1
UPDATE delayed_queue FORCE INDEX (PRIMARY) SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1), claimed_by=:actor WHERE delayed_queue.id IN (:ids_1);

-- events 0
INSERT INTO delayed_queue_history (pkind, pkey, at, kind, actor, attempt, detail) VALUES (:pkind_0, :pkey_0, :at_0, :kind_0, :actor_0, :attempt_0, :detail_0), (:pkind_1, :pkey_1, :at_1, :kind_1, :actor_1, :attempt_1, :detail_1);

-- ack_many which 0
SELECT delayed_queue.id, delayed_queue.pkey FROM delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock_uuid_1 AND delayed_queue.id IN (:id_1_1, :id_1_2) FOR UPDATE;

-- ack_many which 1
DELETE FROM delayed_queue USING delayed_queue FORCE INDEX (PRIMARY) WHERE delayed_queue.lock_uuid = :lock_uuid_1 AND delayed_queue.id IN (:id_1_1, :id_1_2);

-- drop which 0
SELECT delayed_queue.id, delayed_queue.pkey FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1 FOR UPDATE;

-- drop which 1
DELETE FROM delayed_queue WHERE delayed_queue.id IN (:id_1_1) LIMIT 1;

-- clear batch 0
SELECT delayed_queue.id, delayed_queue.pkey FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 ORDER BY delayed_queue.id LIMIT :param_1 FOR UPDATE;

-- clear batch 1
DELETE FROM delayed_queue WHERE delayed_queue.id IN (:id_1_1) LIMIT 1;

-- history 0
SELECT delayed_queue_history.pkey, delayed_queue_history.at, delayed_queue_history.kind, delayed_queue_history.actor, delayed_queue_history.attempt, delayed_queue_history.detail FROM delayed_queue_history WHERE delayed_queue_history.pkind = :pkind_1 AND delayed_queue_history.pkey = :pkey_1 ORDER BY delayed_queue_history.id;

-- prune 0
SELECT delayed_queue_history.id FROM delayed_queue_history WHERE delayed_queue_history.pkind = :pkind_1 AND delayed_queue_history.at < :at_1 ORDER BY delayed_queue_history.at LIMIT :param_1;

-- prune 1
DELETE FROM delayed_queue_history WHERE delayed_queue_history.id IN (:id_1_1, :id_1_2);

-- release
UPDATE delayed_queue SET scheduled_at=:scheduled_at, lock_uuid=:lock_uuid WHERE delayed_queue.id = :id_1 AND delayed_queue.lock_uuid = :lock_uuid_1;

-- extend
UPDATE delayed_queue SET scheduled_at=:scheduled_at WHERE delayed_queue.id = :id_1 AND delayed_queue.lock_uuid = :lock_uuid_1 AND (delayed_queue.scheduled_at > :scheduled_at_1 OR NOT (EXISTS (SELECT * FROM delayed_queue_settings WHERE delayed_queue_settings.pkind = :pkind_1 AND delayed_queue_settings.max_in_flight IS NOT NULL)));

-- extend grouped
UPDATE delayed_queue SET scheduled_at=:scheduled_at WHERE delayed_queue.id = :id_1 AND delayed_queue.lock_uuid = :lock_uuid_1 AND delayed_queue.scheduled_at > :scheduled_at_1;

-- get
SELECT delayed_queue.id, delayed_queue.pkind, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.lock_uuid, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.claimed_by, delayed_queue.trace_context FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- contains
SELECT :param_1 AS anon_1 FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- drop
DELETE FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- clear
DELETE FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1;

-- stats
SELECT coalesce(sum(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN :param_1 ELSE :param_2 END), :coalesce_1) AS due, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NULL) THEN :param_3 ELSE :param_4 END), :coalesce_2) AS scheduled, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NOT NULL) THEN :param_5 ELSE :param_6 END), :coalesce_3) AS in_flight, min(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN delayed_queue.scheduled_at END) AS oldest_due FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1;

-- stats of every queue
SELECT delayed_queue.pkind, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN :param_1 ELSE :param_2 END), :coalesce_1) AS due, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NULL) THEN :param_3 ELSE :param_4 END), :coalesce_2) AS scheduled, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NOT NULL) THEN :param_5 ELSE :param_6 END), :coalesce_3) AS in_flight, min(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN delayed_queue.scheduled_at END) AS oldest_due FROM delayed_queue GROUP BY delayed_queue.pkind ORDER BY delayed_queue.pkind;

-- a page of queues
SELECT b.pkind, sum(b.due) AS due, sum(b.scheduled) AS scheduled, sum(b.in_flight) AS in_flight, min(b.oldest_due) AS oldest_due, sum(b.dead_letters) AS dead_letters FROM (SELECT s.pkind AS pkind, s.due AS due, s.scheduled AS scheduled, s.in_flight AS in_flight, s.oldest_due AS oldest_due, 0 AS dead_letters FROM (SELECT delayed_queue.pkind AS pkind, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN :param_1 ELSE :param_2 END), :coalesce_1) AS due, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NULL) THEN :param_3 ELSE :param_4 END), :coalesce_2) AS scheduled, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NOT NULL) THEN :param_5 ELSE :param_6 END), :coalesce_3) AS in_flight, min(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN delayed_queue.scheduled_at END) AS oldest_due FROM delayed_queue WHERE delayed_queue.pkind > :pkind_1 AND delayed_queue.pkind LIKE :pkind_2 ESCAPE '!' GROUP BY delayed_queue.pkind ORDER BY delayed_queue.pkind LIMIT :param_7) AS s UNION ALL SELECT d.pkind AS pkind, 0, 0, 0, CAST(NULL AS SIGNED INTEGER) AS anon_1, d.dead_letters AS dead_letters FROM (SELECT dq_dead.pkind AS pkind, count(*) AS dead_letters FROM dq_dead WHERE dq_dead.pkind > :pkind_3 AND dq_dead.pkind LIKE :pkind_4 ESCAPE '!' GROUP BY dq_dead.pkind ORDER BY dq_dead.pkind LIMIT :param_8) AS d) AS b GROUP BY b.pkind ORDER BY b.pkind LIMIT :param_9;

-- peek due
SELECT page.id, page.pkind, page.pkey, page.payload, page.scheduled_at, page.scheduled_at_initially, page.lock_uuid, page.created_at, page.deliveries, page.priority, page.group_key, page.enqueued_by, page.claimed_by, page.trace_context FROM (SELECT anon_1.id AS id, anon_1.pkind AS pkind, anon_1.pkey AS pkey, anon_1.payload AS payload, anon_1.scheduled_at AS scheduled_at, anon_1.scheduled_at_initially AS scheduled_at_initially, anon_1.lock_uuid AS lock_uuid, anon_1.created_at AS created_at, anon_1.deliveries AS deliveries, anon_1.priority AS priority, anon_1.group_key AS group_key, anon_1.enqueued_by AS enqueued_by, anon_1.claimed_by AS claimed_by, anon_1.trace_context AS trace_context FROM (SELECT delayed_queue.id AS id, delayed_queue.pkind AS pkind, delayed_queue.pkey AS pkey, delayed_queue.payload AS payload, delayed_queue.scheduled_at AS scheduled_at, delayed_queue.scheduled_at_initially AS scheduled_at_initially, delayed_queue.lock_uuid AS lock_uuid, delayed_queue.created_at AS created_at, delayed_queue.deliveries AS deliveries, delayed_queue.priority AS priority, delayed_queue.group_key AS group_key, delayed_queue.enqueued_by AS enqueued_by, delayed_queue.claimed_by AS claimed_by, delayed_queue.trace_context AS trace_context FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey LIKE :pkey_1 ESCAPE '!' AND delayed_queue.scheduled_at = :scheduled_at_1 AND delayed_queue.id > :id_1 ORDER BY delayed_queue.scheduled_at, delayed_queue.id LIMIT :param_1) AS anon_1 UNION ALL SELECT anon_2.id AS id, anon_2.pkind AS pkind, anon_2.pkey AS pkey, anon_2.payload AS payload, anon_2.scheduled_at AS scheduled_at, anon_2.scheduled_at_initially AS scheduled_at_initially, anon_2.lock_uuid AS lock_uuid, anon_2.created_at AS created_at, anon_2.deliveries AS deliveries, anon_2.priority AS priority, anon_2.group_key AS group_key, anon_2.enqueued_by AS enqueued_by, anon_2.claimed_by AS claimed_by, anon_2.trace_context AS trace_context FROM (SELECT delayed_queue.id AS id, delayed_queue.pkind AS pkind, delayed_queue.pkey AS pkey, delayed_queue.payload AS payload, delayed_queue.scheduled_at AS scheduled_at, delayed_queue.scheduled_at_initially AS scheduled_at_initially, delayed_queue.lock_uuid AS lock_uuid, delayed_queue.created_at AS created_at, delayed_queue.deliveries AS deliveries, delayed_queue.priority AS priority, delayed_queue.group_key AS group_key, delayed_queue.enqueued_by AS enqueued_by, delayed_queue.claimed_by AS claimed_by, delayed_queue.trace_context AS trace_context FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey LIKE :pkey_1 ESCAPE '!' AND delayed_queue.scheduled_at <= :scheduled_at_2 AND delayed_queue.scheduled_at > :scheduled_at_3 ORDER BY delayed_queue.scheduled_at, delayed_queue.id LIMIT :param_2) AS anon_2) AS page ORDER BY page.scheduled_at, page.id LIMIT :param_3;

-- peek in flight
SELECT delayed_queue.id, delayed_queue.pkind, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.lock_uuid, delayed_queue.created_at, delayed_queue.deliveries, delayed_queue.priority, delayed_queue.group_key, delayed_queue.enqueued_by, delayed_queue.claimed_by, delayed_queue.trace_context FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.lock_uuid IS NOT NULL AND delayed_queue.scheduled_at > :scheduled_at_1 ORDER BY delayed_queue.scheduled_at, delayed_queue.id LIMIT :param_1;

