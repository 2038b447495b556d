"""The store's SQLite schema, its migrations and every statement the store runs, in one place."""

# Each migration is a tuple of statements, applied in one transaction with user_version.
SCHEMA_V1 = (
    """CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        model TEXT,
        previous_response_id TEXT,
        conversation_id TEXT,
        background INTEGER NOT NULL DEFAULT 0,
        store INTEGER NOT NULL DEFAULT 1,
        request TEXT NOT NULL,
        input_items TEXT NOT NULL,
        response TEXT NOT NULL)""",
    "CREATE INDEX responses_by_status ON responses(status)",
    """CREATE TABLE response_events (
        response_id TEXT NOT NULL REFERENCES responses(id) ON DELETE CASCADE,
        sequence_number INTEGER NOT NULL,
        event TEXT NOT NULL,
        PRIMARY KEY (response_id, sequence_number)) WITHOUT ROWID""",
    """CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        created_at INTEGER NOT NULL,
        metadata TEXT NOT NULL)""",
    """CREATE TABLE conversation_items (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        item_id TEXT NOT NULL,
        item TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (conversation_id, position)) WITHOUT ROWID""",
    "CREATE INDEX conversation_items_by_id ON conversation_items(conversation_id, item_id)",
)
# Whose each response and conversation is: the scope of the API key that made it (wire/access.py);
# rows from before it have the one scope of a server with a single key or none.
SCHEMA_V2 = (
    "ALTER TABLE responses ADD COLUMN scope TEXT NOT NULL DEFAULT ''",
    "ALTER TABLE conversations ADD COLUMN scope TEXT NOT NULL DEFAULT ''",
)
# Anthropic Message Threads (store/threads.py): a thread's held conversation, and each reply id it
# answered, so a continue from any of them finds the thread (and knows whether it is the latest).
SCHEMA_V3 = (
    """CREATE TABLE threads (
        id TEXT PRIMARY KEY,
        scope TEXT NOT NULL,
        latest_message_id TEXT NOT NULL,
        state TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at REAL NOT NULL,
        used_at REAL NOT NULL,
        continuing INTEGER NOT NULL DEFAULT 0)""",
    "CREATE INDEX threads_by_scope_use ON threads(scope, used_at)",
    "CREATE INDEX threads_by_use ON threads(used_at)",
    """CREATE TABLE thread_messages (
        message_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL REFERENCES threads(id) ON DELETE CASCADE) WITHOUT ROWID""",
    "CREATE INDEX thread_messages_by_thread ON thread_messages(thread_id)",
)
MIGRATIONS = [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3]

# Every statement that finds a response or a conversation by its id names the scope too: another
# key's is not found (statements that follow such a find in one transaction need not).

INSERT_RESPONSE = """INSERT INTO responses (id, created_at, status, model, previous_response_id,
    conversation_id, background, store, request, input_items, response, scope)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
SELECT_RESPONSE = "SELECT response FROM responses WHERE id = ? AND scope = ?"
SELECT_STATUS = "SELECT status, response FROM responses WHERE id = ? AND scope = ?"
SELECT_INPUT_ITEMS = "SELECT input_items FROM responses WHERE id = ? AND scope = ?"
SELECT_INTERRUPTED = (
    "SELECT id, response FROM responses WHERE status IN ('queued', 'in_progress')"
)
UPDATE_RESPONSE = "UPDATE responses SET status = ?, response = ? WHERE id = ?"
DELETE_RESPONSE = "DELETE FROM responses WHERE id = ? AND scope = ?"
SELECT_CHAIN = """WITH RECURSIVE chain(id, previous_response_id, depth) AS (
        SELECT id, previous_response_id, 0 FROM responses WHERE id = ?1 AND scope = ?2
        UNION ALL
        SELECT r.id, r.previous_response_id, c.depth + 1
        FROM responses r JOIN chain c ON r.id = c.previous_response_id
        WHERE c.depth < ?3 AND r.scope = ?2)
    SELECT c.previous_response_id, r.input_items, r.response
    FROM chain c JOIN responses r ON r.id = c.id ORDER BY c.depth DESC"""
MAX_CHAIN_DEPTH = 10_000

INSERT_EVENT = "INSERT INTO response_events (response_id, sequence_number, event) VALUES (?, ?, ?)"
SELECT_EVENTS = """SELECT e.event FROM response_events e JOIN responses r ON r.id = e.response_id
    WHERE e.response_id = ? AND r.scope = ? AND e.sequence_number > ? ORDER BY e.sequence_number"""
SELECT_LAST_SEQUENCE = "SELECT max(sequence_number) FROM response_events WHERE response_id = ?"

INSERT_CONVERSATION = "INSERT INTO conversations (id, created_at, metadata, scope) VALUES (?, ?, ?, ?)"
SELECT_CONVERSATION = "SELECT id, created_at, metadata FROM conversations WHERE id = ? AND scope = ?"
UPDATE_CONVERSATION = "UPDATE conversations SET metadata = ? WHERE id = ? AND scope = ?"
DELETE_CONVERSATION = "DELETE FROM conversations WHERE id = ? AND scope = ?"
INSERT_ITEM = """INSERT INTO conversation_items
    (conversation_id, position, item_id, item, created_at) VALUES (?, ?, ?, ?, ?)"""
SELECT_NEXT_POSITION = (
    "SELECT coalesce(max(position) + 1, 0) FROM conversation_items WHERE conversation_id = ?"
)
SELECT_ITEM_POSITION = """SELECT min(position) FROM conversation_items
    WHERE conversation_id = ? AND item_id = ?"""
SELECT_ITEM = """SELECT item FROM conversation_items
    WHERE conversation_id = ? AND item_id = ? ORDER BY position DESC LIMIT 1"""
SELECT_ITEMS_ASC = """SELECT item FROM conversation_items
    WHERE conversation_id = ? AND position > ? ORDER BY position ASC LIMIT ?"""
SELECT_ITEMS_DESC = """SELECT item FROM conversation_items
    WHERE conversation_id = ? AND position < ? ORDER BY position DESC LIMIT ?"""
SELECT_ALL_ITEMS = "SELECT item FROM conversation_items WHERE conversation_id = ? ORDER BY position"
DELETE_ITEM = "DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ?"

# Threads: found by a reply id in the key's scope; a continue claims the thread (continuing = 1)
# until its reply is kept or it fails; a process that died left its claims, released at start.
INSERT_THREAD = """INSERT INTO threads (id, scope, latest_message_id, state, bytes, created_at, used_at)
    VALUES (?, ?, ?, ?, ?, ?, ?)"""
INSERT_THREAD_MESSAGE = "INSERT INTO thread_messages (message_id, thread_id) VALUES (?, ?)"
SELECT_THREAD_OF = """SELECT t.id, t.latest_message_id, t.state, t.continuing, t.used_at
    FROM thread_messages m JOIN threads t ON t.id = m.thread_id WHERE m.message_id = ? AND t.scope = ?"""
SELECT_THREAD_HELD = "SELECT 1 FROM threads WHERE id = ?"
CLAIM_THREAD = "UPDATE threads SET continuing = 1 WHERE id = ?"
RELEASE_THREAD = "UPDATE threads SET continuing = 0 WHERE id = ? AND scope = ?"
RELEASE_ALL_THREADS = "UPDATE threads SET continuing = 0 WHERE continuing = 1"
ADVANCE_THREAD = """UPDATE threads SET latest_message_id = ?, state = ?, bytes = ?, used_at = ?, continuing = 0
    WHERE id = ? AND scope = ? AND latest_message_id = ?"""
DELETE_EXPIRED_THREADS = "DELETE FROM threads WHERE used_at < ? AND continuing = 0"
# a key's threads past its count, then one past its bytes alone, then past its bytes together, newest
# kept first; claimed ones are spared
DELETE_THREADS_TOO_LARGE = "DELETE FROM threads WHERE scope = ? AND bytes > ? AND continuing = 0"
DELETE_THREADS_PAST_COUNT = """DELETE FROM threads WHERE id IN (
    SELECT id FROM threads WHERE scope = ?1 ORDER BY used_at DESC, id LIMIT -1 OFFSET ?2) AND continuing = 0"""
DELETE_THREADS_PAST_BYTES = """DELETE FROM threads WHERE id IN (
    SELECT id FROM (SELECT id, sum(bytes) OVER (ORDER BY used_at DESC, id) AS total FROM threads WHERE scope = ?1)
    WHERE total > ?2) AND continuing = 0"""
