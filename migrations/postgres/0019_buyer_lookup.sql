-- The buyer's way back to an order: the contact a checkout named (normalised: an e-mail address in
-- lower case, a phone number as digits with an optional leading +), the slow hash of the lookup
-- password the buyer chose, and the language the buyer checked out in (what messages to the buyer
-- are written in).
ALTER TABLE orders ADD COLUMN contact_email TEXT;
ALTER TABLE orders ADD COLUMN contact_phone TEXT;
ALTER TABLE orders ADD COLUMN lookup_hash TEXT;
ALTER TABLE orders ADD COLUMN lang TEXT;
-- Whether e-mail was configured when the order was placed with an address: only such orders get
-- mail about what happens to them (turning e-mail on later sends nothing about older orders).
ALTER TABLE orders ADD COLUMN mail_enabled BIGINT NOT NULL DEFAULT 0;
-- The console's search finds a buyer's orders by the contact they give support.
CREATE INDEX orders_by_contact_email ON orders (contact_email) WHERE contact_email IS NOT NULL;
CREATE INDEX orders_by_contact_phone ON orders (contact_phone) WHERE contact_phone IS NOT NULL;

-- A link to one order, handed to whoever proved to be its buyer: the token carries the id, the
-- order, the purpose and the expiry under kassa's signature; the row makes it single use (used_at
-- set by the first reveal of the order's keys, with who used it).
CREATE TABLE lookup_links (
    id          TEXT PRIMARY KEY,
    order_no    TEXT NOT NULL REFERENCES orders (order_no),
    purpose     TEXT NOT NULL CHECK (purpose = 'order'),
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT,
    used_addr   TEXT,
    used_agent  TEXT
);
CREATE INDEX lookup_links_by_order ON lookup_links (order_no);
CREATE INDEX lookup_links_by_expiry ON lookup_links (expires_at);

-- Every time an order's card keys were shown, and to whom: the evidence a dispute needs.
CREATE TABLE key_reveals (
    id           TEXT PRIMARY KEY,
    order_no     TEXT NOT NULL REFERENCES orders (order_no),
    revealed_at  BIGINT NOT NULL,
    channel      TEXT NOT NULL CHECK (channel = 'order_page' OR channel = 'api' OR channel = 'lookup_link' OR channel = 'admin' OR channel = 'email'),
    keys         BIGINT NOT NULL CHECK (keys > 0),
    client_addr  TEXT,
    user_agent   TEXT
);
CREATE INDEX key_reveals_by_order ON key_reveals (order_no, revealed_at);

-- E-mail to the buyer, an outbox of its own: written in the same transaction as the fact it tells
-- (paid, delivered, refunded, a lookup's link), sent by the mail worker with retries. The text is
-- composed when sent, from the order as it is then; the Message-ID is the row's id, so a message
-- sent again after a crash between sending and recording is the same message.
CREATE TABLE mail_messages (
    id               TEXT PRIMARY KEY,
    order_no         TEXT REFERENCES orders (order_no),
    kind             TEXT NOT NULL CHECK (kind = 'paid' OR kind = 'delivered' OR kind = 'refunded' OR kind = 'lookup_link' OR kind = 'test'),
    recipient        TEXT NOT NULL,
    lang             TEXT NOT NULL,
    link_id          TEXT REFERENCES lookup_links (id),
    status           TEXT NOT NULL CHECK (status = 'pending' OR status = 'sent' OR status = 'failed' OR status = 'superseded'),
    tries            BIGINT NOT NULL DEFAULT 0,
    next_attempt_at  BIGINT NOT NULL,
    lease_until      BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT,
    created_at       BIGINT NOT NULL,
    sent_at          BIGINT
);
CREATE INDEX mail_messages_due ON mail_messages (next_attempt_at) WHERE status = 'pending';
CREATE INDEX mail_messages_by_order ON mail_messages (order_no);
CREATE INDEX mail_messages_by_creation ON mail_messages (created_at);
