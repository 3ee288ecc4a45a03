-- Admin secrets (S3 §5 "one-way secret ingestion"; DESIGN §4): values AES-256-GCM encrypted with
-- SECRETS_ENCRYPTION_KEY (a fresh 96-bit IV per write, the name bound as additional data), never returned.
CREATE TABLE admin_secrets (
  name TEXT PRIMARY KEY,
  iv TEXT NOT NULL,          -- base64, 12 bytes
  ciphertext TEXT NOT NULL,  -- base64, value + 16-byte GCM tag
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL
);
