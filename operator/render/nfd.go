package render

import (
	"fmt"

	nfdv1alpha1 "sigs.k8s.io/node-feature-discovery/api/nfd/v1alpha1"
	"sigs.k8s.io/yaml"

	slicerv1alpha1 "github.com/slicer-operator/slicer/api/v1alpha1"
	nfdrules "github.com/slicer-operator/slicer/nfd-rules"
)

// BaseNodeFeatureRule parses nfd-rules/nodefeaturerule.yaml.
func BaseNodeFeatureRule() (*nfdv1alpha1.NodeFeatureRule, error) {
	rule := &nfdv1alpha1.NodeFeatureRule{}
	if err := yaml.UnmarshalStrict(nfdrules.NodeFeatureRule, rule); err != nil {
		return nil, fmt.Errorf("parse nfd-rules/nodefeaturerule.yaml: %w", err)
	}
	return rule, nil
}

// NodeFeatureRule renders the rule that labels MIG-capable nodes: the
// embedded rule with the CR's extra match expressions added to every rule.
func NodeFeatureRule(o Options) (*nfdv1alpha1.NodeFeatureRule, error) {
	rule, err := BaseNodeFeatureRule()
	if err != nil {
		return nil, err
	}
	rule.TypeMeta = typeMeta(nfdv1alpha1.SchemeGroupVersion.WithKind("NodeFeatureRule"))
	rule.Labels = commonLabels()
	extra := extraTerms(o.Slicer.Spec.NodeSelection.ExtraMatchExpressions)
	for i := range rule.Spec.Rules {
		rule.Spec.Rules[i].MatchFeatures = append(rule.Spec.Rules[i].MatchFeatures, extra...)
	}
	return rule, nil
}

// extraTerms turns the CR's expressions into NFD matcher terms, one term per
// feature, keys in the order given.
func extraTerms(exprs []slicerv1alpha1.NodeFeatureExpression) []nfdv1alpha1.FeatureMatcherTerm {
	var terms []nfdv1alpha1.FeatureMatcherTerm
	index := map[string]int{}
	for _, e := range exprs {
		i, ok := index[e.Feature]
		if !ok {
			set := nfdv1alpha1.MatchExpressionSet{}
			terms = append(terms, nfdv1alpha1.FeatureMatcherTerm{Feature: e.Feature, MatchExpressions: &set})
			i = len(terms) - 1
			index[e.Feature] = i
		}
		(*terms[i].MatchExpressions)[e.Key] = &nfdv1alpha1.MatchExpression{
			Op:    nfdv1alpha1.MatchOp(e.Operator),
			Value: nfdv1alpha1.MatchValue(append([]string(nil), e.Values...)),
		}
	}
	return terms
}
