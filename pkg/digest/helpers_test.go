package digest

import (
	"crypto/sha256"
	"encoding/hex"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return Prefix + hex.EncodeToString(sum[:])
}
