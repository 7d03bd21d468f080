package admission

import (
	"testing"

	"github.com/sandgate/sandgate"
)

// TestSpecDigest checks that the digest ignores how empty values are
// spelled and sees every real difference.
func TestSpecDigest(t *testing.T) {
	f := false
	base := sandgate.RunSpec{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1}}
	same := []sandgate.RunSpec{
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1}, Env: map[string]string{}, CapAdd: []string{}},
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1.0}, Labels: map[string]string{}, Ports: nil},
	}
	for i, s := range same {
		if specDigest(s) != specDigest(base) {
			t.Errorf("same[%d] digests differently", i)
		}
	}
	different := []sandgate.RunSpec{
		{Command: []string{"echo", "x"}, Resources: sandgate.Resources{CPUs: 1}},
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 2}},
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1}, Env: map[string]string{"A": ""}},
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1}, ReadOnlyRootfs: &f},
		{Command: []string{"echo"}, Resources: sandgate.Resources{CPUs: 1}, Privileged: true},
	}
	for i, s := range different {
		if specDigest(s) == specDigest(base) {
			t.Errorf("different[%d] digests the same", i)
		}
	}
}
