package audit

import "github.com/sandgate/sandgate"

// Masker is the masker of this Store's mask key: the one owner of
// masking (sandgate.Masker), which the gateway uses when it has no key of
// its own, so that every hash in the trail is made with one key.
func (s *Store) Masker() sandgate.Masker {
	return sandgate.NewMasker(s.maskKey)
}
