-- ddl 0
CREATE TABLE delayed_queue ( id BIGINT NOT NULL AUTO_INCREMENT, pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, payload LONGBLOB NOT NULL, scheduled_at BIGINT NOT NULL, scheduled_at_initially BIGINT NOT NULL, lock_uuid VARCHAR(36), created_at BIGINT NOT NULL, deliveries INTEGER NOT NULL, PRIMARY KEY (id) );

-- ddl 1
CREATE INDEX delayed_queue_kind_due_ix ON delayed_queue (pkind, scheduled_at, id);

-- ddl 2
CREATE UNIQUE INDEX delayed_queue_kind_key_uq ON delayed_queue (pkind, pkey);

-- ddl 3
CREATE INDEX delayed_queue_lock_ix ON delayed_queue (lock_uuid);

-- ddl 4
CREATE TABLE delayed_queue_dead ( id BIGINT NOT NULL AUTO_INCREMENT, pkind VARCHAR(100) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, pkey VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, payload LONGBLOB NOT NULL, scheduled_at_initially BIGINT NOT NULL, created_at BIGINT NOT NULL, attempts INTEGER NOT NULL, last_error VARCHAR(2000) CHARACTER SET utf8mb4, failed_at BIGINT NOT NULL, PRIMARY KEY (id) );

-- ddl 5
CREATE INDEX delayed_queue_dead_kind_ix ON delayed_queue_dead (pkind, failed_at, id);

-- offer 0
SELECT delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at_initially FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey IN (:keys_1, :keys_2, :keys_3) FOR UPDATE;

-- offer 1
INSERT INTO delayed_queue (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, created_at, deliveries) VALUES (:pkind_0, :pkey_0, :payload_0, :scheduled_at_0, :scheduled_at_initially_0, :lock_uuid_0, :created_at_0, :deliveries_0);

-- offer 2
INSERT INTO delayed_queue (pkind, pkey, payload, scheduled_at, scheduled_at_initially, lock_uuid, created_at, deliveries) VALUES (:pkind_m0, :pkey_m0, :payload_m0, :scheduled_at_m0, :scheduled_at_initially_m0, :lock_uuid_m0, :created_at_m0, :deliveries_m0) ON DUPLICATE KEY UPDATE payload = VALUES(payload), scheduled_at = VALUES(scheduled_at), scheduled_at_initially = VALUES(scheduled_at_initially), lock_uuid = :param_1, created_at = VALUES(created_at), deliveries = :param_2;

-- claim 0
SELECT delayed_queue.id, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.created_at, delayed_queue.deliveries FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.scheduled_at <= :scheduled_at_1 ORDER BY delayed_queue.scheduled_at, delayed_queue.id LIMIT :param_1 FOR UPDATE SKIP LOCKED;

-- claim 1
UPDATE delayed_queue SET scheduled_at=:until, lock_uuid=:lock, deliveries=(delayed_queue.deliveries + :deliveries_1) WHERE delayed_queue.id IN (:ids_1);

-- ack 0
DELETE FROM delayed_queue WHERE delayed_queue.id = :id AND delayed_queue.lock_uuid = :lock;

-- ack_many 0
DELETE FROM delayed_queue WHERE delayed_queue.lock_uuid = :lock AND delayed_queue.id IN (:ids_1, :ids_2);

-- release
UPDATE delayed_queue SET scheduled_at=:scheduled_at, lock_uuid=:lock_uuid WHERE delayed_queue.id = :id_1 AND delayed_queue.lock_uuid = :lock_uuid_1;

-- extend
UPDATE delayed_queue SET scheduled_at=:scheduled_at WHERE delayed_queue.id = :id_1 AND delayed_queue.lock_uuid = :lock_uuid_1;

-- get
SELECT delayed_queue.id, delayed_queue.pkind, delayed_queue.pkey, delayed_queue.payload, delayed_queue.scheduled_at, delayed_queue.scheduled_at_initially, delayed_queue.lock_uuid, delayed_queue.created_at, delayed_queue.deliveries FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- contains
SELECT :param_1 AS anon_1 FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- drop
DELETE FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1 AND delayed_queue.pkey = :pkey_1;

-- clear
DELETE FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1;

-- stats
SELECT coalesce(sum(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN :param_1 ELSE :param_2 END), :coalesce_1) AS due, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NULL) THEN :param_3 ELSE :param_4 END), :coalesce_2) AS scheduled, coalesce(sum(CASE WHEN (delayed_queue.scheduled_at > :scheduled_at_2 AND delayed_queue.lock_uuid IS NOT NULL) THEN :param_5 ELSE :param_6 END), :coalesce_3) AS in_flight, min(CASE WHEN (delayed_queue.scheduled_at <= :scheduled_at_1) THEN delayed_queue.scheduled_at END) AS oldest_due FROM delayed_queue WHERE delayed_queue.pkind = :pkind_1;

