package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
)

// DigestKeyBytes is the size of the installation's digest key.
const DigestKeyBytes = 32

// digestKeyInsert makes the key unless a replica made it first; the read
// after it then sees the one key every replica sees.
const digestKeyInsert = `INSERT INTO digest_key (id, key) VALUES (1, ?) ON CONFLICT (id) DO NOTHING`

const digestKeySelect = `SELECT key FROM digest_key WHERE id = 1`

// DigestKey returns the installation's digest key (migration 0009), making
// it from crypto/rand on the first call of any replica.
func (s *sqlStore) DigestKey(ctx context.Context) ([]byte, error) {
	key, err := s.digestKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the digest key: %w", err)
	}
	return key, nil
}

func (s *sqlStore) digestKey(ctx context.Context) ([]byte, error) {
	var key []byte
	err := s.queryRow(ctx, s.r, digestKeySelect).Scan(&key)
	switch {
	case err == nil:
		return checkDigestKey(key)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, err
	}
	fresh := make([]byte, DigestKeyBytes)
	if _, err := rand.Read(fresh); err != nil {
		return nil, err
	}
	if _, err := s.w.ExecContext(ctx, s.d.rebind(digestKeyInsert), fresh); err != nil {
		return nil, err
	}
	if err := s.queryRow(ctx, s.w, digestKeySelect).Scan(&key); err != nil {
		return nil, err
	}
	return checkDigestKey(key)
}

// checkDigestKey refuses a key of another size than the schema allows,
// which only a hand-edited row could have.
func checkDigestKey(key []byte) ([]byte, error) {
	if len(key) != DigestKeyBytes {
		return nil, fmt.Errorf("table digest_key holds %d bytes, want %d", len(key), DigestKeyBytes)
	}
	return key, nil
}
