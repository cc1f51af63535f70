//! The projections machinery: a view keeps a projection of each object (what decisions read,
//! reduced at once as the watch delivers it), rebuilt as a full object for each decision.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What every projection keeps of an object's identity: the name and namespace its store is
/// keyed by ([`keyed_by_name`]), the UID a delete's precondition names and the resourceVersion
/// a write's precondition (and the own-write memory) names. Four strings, where an
/// `ObjectMeta` is 360 bytes before any of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectId {
    pub name: String,
    pub namespace: String,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl ObjectId {
    /// Takes an object's identity out of its metadata, leaving the rest for the projection.
    pub fn take(meta: &mut ObjectMeta) -> Self {
        Self {
            name: meta.name.take().unwrap_or_default(),
            namespace: meta.namespace.take().unwrap_or_default(),
            uid: meta.uid.take(),
            resource_version: meta.resource_version.take(),
        }
    }

    /// The metadata a projection is rebuilt with: its identity and nothing else (the caller
    /// adds what else it kept with `..id.meta()`).
    pub fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: Some(self.name.clone()),
            namespace: Some(self.namespace.clone()),
            uid: self.uid.clone(),
            resource_version: self.resource_version.clone(),
            ..Default::default()
        }
    }
}

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

/// A projection kept in a reflector store keyed by its identity's ([`ObjectId`], field `id`)
/// `name` and `namespace` only: a version and UID in each key would be two more strings per
/// object, read by nobody (an `ObjectRef` compares nothing else). Without a group and version:
/// a fleet-networking type (`networking.fleet.azure.com/v1alpha1`).
macro_rules! keyed_by_name {
    ($ty:ty, $kind:literal, $plural:literal) => {
        $crate::controller::projection::keyed_by_name!(
            $ty,
            $kind,
            $crate::api::GROUP,
            "v1alpha1",
            $plural
        );
    };
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
                Some(self.id.name.as_str().into())
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(self.id.namespace.as_str().into())
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
