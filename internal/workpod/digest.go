package workpod

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// DigestPrefix marks a keyed digest: HMAC-SHA256 under the installation's
// digest key (store.DigestKey). A bare SHA-256 of a short secret or of a
// request lets whoever copies the store guess the value offline and check
// each guess; without the key a digest says nothing. Rows written before
// the key keep their bare hex SHA-256, with no prefix.
const DigestPrefix = "hmac-sha256:"

// Digest is data's keyed digest under key, as rows keep it.
func Digest(key, data []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return DigestPrefix + hex.EncodeToString(m.Sum(nil))
}

// DigestMatches reports whether stored, a row's digest, is data's: a keyed
// one under key, or the bare SHA-256 of a row written before the key was,
// so that such a row still matches its value. The comparison takes the
// same time wherever the digests differ.
func DigestMatches(key, data []byte, stored string) bool {
	want := Digest(key, data)
	if !strings.HasPrefix(stored, DigestPrefix) {
		sum := sha256.Sum256(data)
		want = hex.EncodeToString(sum[:])
	}
	return hmac.Equal([]byte(want), []byte(stored))
}
