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
MIGRATIONS = [SCHEMA_V1, SCHEMA_V2]

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
