package gateway

import (
	"testing"

	"github.com/sandgate/sandgate/gateway/api/apitest"
)

// TestMain runs the tests and, with -v, says how much of their traffic
// the OpenAPI checker validated.
func TestMain(m *testing.M) { apitest.Main(m) }
