package api

import (
	"testing"

	"github.com/sandgate/sandgate"
)

// TestStatusOf checks the code to status table.
func TestStatusOf(t *testing.T) {
	tests := []struct {
		code sandgate.ErrorCode
		want int
	}{
		{sandgate.CodeInvalidRequest, 400},
		{sandgate.CodeUnauthenticated, 401},
		{sandgate.CodeForbidden, 403},
		{sandgate.CodePolicyDenied, 403},
		{sandgate.CodeNotFound, 404},
		{sandgate.CodeMethodNotAllowed, 405},
		{sandgate.CodeConflict, 409},
		{sandgate.CodeTooLarge, 413},
		{sandgate.CodePolicyInvalid, 422},
		{sandgate.CodeRateLimited, 429},
		{sandgate.CodeAuditUnavailable, 503},
		{sandgate.CodeDockerUnavailable, 503},
		{sandgate.CodeUnavailable, 503},
		{sandgate.CodeInternal, 500},
		{sandgate.CodeContainerCreate, 502},
		{sandgate.CodeImageUnavailable, 422},
		{sandgate.CodeMountError, 422},
		{sandgate.CodeResourceLimit, 422},
		{"SANDGATE-SOMETHING-NEW", 500},
	}
	for _, tc := range tests {
		t.Run(string(tc.code), func(t *testing.T) {
			if got := StatusOf(tc.code); got != tc.want {
				t.Errorf("StatusOf(%s) = %d, want %d", tc.code, got, tc.want)
			}
		})
	}
}
