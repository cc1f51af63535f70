//! The projections machinery: a view keeps a projection of each object (what decisions read,
//! reduced at once as the watch delivers it), rebuilt as a full object for each decision.

use std::collections::BTreeMap;


/// The values of `keys` among an object's annotations, in that order: what a view keeps of
/// them (a `BTreeMap` of two entries is a 544-byte node; a `kubectl apply` annotation alone can
/// be larger than all the rest).
pub(crate) fn kept<const N: usize>(
    keys: [&str; N],
    annotations: Option<BTreeMap<String, String>>,
) -> [Option<String>; N] {
    let mut annotations = annotations.unwrap_or_default();
    keys.map(|k| annotations.remove(k))
}

/// The annotations a view kept ([`kept`]) as an object carries them; `None` when there are none.
pub(crate) fn rebuilt(
    keys: &[&str],
    values: &[Option<String>],
) -> Option<BTreeMap<String, String>> {
    let annotations: BTreeMap<String, String> = keys
        .iter()
        .zip(values)
        .filter_map(|(k, v)| Some((k.to_string(), v.clone()?)))
        .collect();
    Some(annotations).filter(|a| !a.is_empty())
}

/// A projection kept in a reflector store keyed by its `name` and `namespace` fields only: a
/// version and UID in each key would be two more strings per object, read by nobody (an
/// `ObjectRef` compares nothing else).
macro_rules! keyed_by_name {
    ($ty:ty, $kind:literal, $group:expr, $version:literal, $plural:literal) => {
        impl kube::runtime::reflector::Lookup for $ty {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.name.as_str().into())
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.namespace.as_str().into())
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                None
            }
        }
    };
}
pub(crate) use keyed_by_name;
