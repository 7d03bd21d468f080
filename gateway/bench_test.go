package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkReview measures the gateway's own cost of POST
// /v1/admission/review over the fakes: auth, decoding, normalisation,
// masking, the audit event, rendering. Policy evaluation is the fake's.
func BenchmarkReview(b *testing.B) {
	e := newEnv(b)
	h := e.srv.Handler()
	body := `{"command":["sh","-c","echo hello"],"env":{"A":"b"},"labels":{"ticket":"ENG-1"}}`
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := httptest.NewRequest(http.MethodPost, "/v1/admission/review", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tokAlice)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
}
