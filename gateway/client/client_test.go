package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestErrorAnswers checks that every error answer becomes a
// *sandgate.Error with the stable code, whatever sent it.
func TestErrorAnswers(t *testing.T) {
	tests := []struct {
		name   string
		status int
		header map[string]string
		body   string
		want   *sandgate.Error
	}{
		{"field error", 400, nil,
			`{"error":{"code":"SANDGATE-INVALID-REQUEST","message":"limit: must be an integer","correlation_id":"c-1","details":{"field":"limit"}}}`,
			&sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: "limit", Message: "must be an integer",
				Details: map[string]any{"field": "limit", "correlation_id": "c-1"}}},
		{"denial", 403, nil,
			`{"error":{"code":"SANDGATE-POLICY-DENIED","message":"denied","correlation_id":"c-2","details":{"allow":false,"decision_id":"d"}}}`,
			&sandgate.Error{Code: sandgate.CodePolicyDenied, Message: "denied",
				Details: map[string]any{"allow": false, "decision_id": "d", "correlation_id": "c-2"}}},
		{"no details", 404, nil,
			`{"error":{"code":"SANDGATE-NOT-FOUND","message":"no such run","correlation_id":"","details":{}}}`,
			&sandgate.Error{Code: sandgate.CodeNotFound, Message: "no such run"}},
		{"proxy page", 502, map[string]string{"X-Correlation-ID": "c-3"}, "<html>bad gateway</html>",
			&sandgate.Error{Code: sandgate.CodeUnavailable, Message: "<html>bad gateway</html>",
				Details: map[string]any{"correlation_id": "c-3"}}},
		{"proxy 404", 404, nil, "", &sandgate.Error{Code: sandgate.CodeNotFound, Message: "Not Found"}},
		{"proxy 429", 429, nil, "slow down", &sandgate.Error{Code: sandgate.CodeRateLimited, Message: "slow down"}},
		{"other 4xx", 418, nil, "teapot", &sandgate.Error{Code: sandgate.CodeInvalidRequest, Message: "teapot"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer ts.Close()
			c, err := New(ts.URL, "tok")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Run(context.Background(), "r")
			var got *sandgate.Error
			if !errors.As(err, &got) {
				t.Fatalf("err = %v (%T), want a *sandgate.Error", err, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if id, _ := tc.want.Details["correlation_id"].(string); CorrelationID(err) != id {
				t.Errorf("CorrelationID = %q, want %q", CorrelationID(err), id)
			}
		})
	}
}
