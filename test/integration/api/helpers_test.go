package api_test

import (
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// rejection is what the apiserver must say about an invalid object: the field
// path of a cause and a fragment of its message.
type rejection struct {
	field   string
	message string
}

// rootField is how the apiserver names the object itself in a cause, for
// rules on the whole object (the only place CEL can read metadata.name).
const rootField = "<nil>"

func rejected(field, message string) *rejection { return &rejection{field: field, message: message} }

// expectOutcome asserts err is nil when want is nil, and otherwise an Invalid
// error with a cause at want.field whose message contains want.message.
func expectOutcome(err error, want *rejection) {
	GinkgoHelper()
	if want == nil {
		Expect(err).NotTo(HaveOccurred())
		return
	}
	Expect(err).To(HaveOccurred(), "expected a rejection at %q", want.field)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "expected Invalid, got %v", err)
	var status apierrors.APIStatus
	Expect(errors.As(err, &status)).To(BeTrue())
	details := status.Status().Details
	Expect(details).NotTo(BeNil())
	Expect(details.Causes).To(ContainElement(SatisfyAll(
		HaveField("Field", want.field),
		HaveField("Message", ContainSubstring(want.message)),
	)), "want a cause at %q containing %q; got %+v", want.field, want.message, details.Causes)
}
