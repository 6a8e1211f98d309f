// Package webhook is Slicer's mutating admission webhook for pods: it turns what users write
// (nvidia.com/mig-<profile> or slicer.dev/mig-<profile>, in limits or requests) into what
// Slicer schedules (slicer.dev/mig-<profile> with requests = limits, spec.schedulerName set
// to the Slicer scheduler), and rejects what cannot be scheduled with a message a user can
// act on.
//
// The decision is a pure function, Mutate(pod, Settings), which returns a minimal JSON patch
// (explicit operations on the fields it changes, never a diff of re-encoded objects) or a
// *Rejection. Handler wraps it for controller-runtime's admission server and Register serves
// it at PathMutatePod (translation as configured) and PathMutatePodNoTranslate (nvidia.com
// resources left to NVIDIA's device plugin; the rendered configuration sends the namespaces
// labelled slicer.dev/translate-nvidia-resources=disabled there).
//
// Package webhook/config renders the MutatingWebhookConfiguration and the
// ValidatingAdmissionPolicy that backs it up when the webhook is down; see README.md.
package webhook
