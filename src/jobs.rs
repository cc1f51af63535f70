//! `--controllers`: which exporters run for every member.

/// The exporters that run for every member (`--controllers`): a fleet can move from the
/// member agents one job at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Controllers {
    /// ServiceExport → InternalServiceExport.
    pub service_exports: bool,
    /// EndpointSlice → EndpointSliceExport.
    pub endpoint_slices: bool,
}

impl Default for Controllers {
    fn default() -> Self {
        Self {
            service_exports: true,
            endpoint_slices: true,
        }
    }
}

impl Controllers {
    /// The names `--controllers` takes.
    pub const NAMES: [&str; 2] = ["serviceexport", "endpointslice"];

    /// Parses a comma-separated list of [`Controllers::NAMES`] (at least one).
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut c = Self {
            service_exports: false,
            endpoint_slices: false,
        };
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "serviceexport" => c.service_exports = true,
                "endpointslice" => c.endpoint_slices = true,
                other => {
                    return Err(format!(
                        "unknown controller {other:?}; known: {}",
                        Self::NAMES.join(", ")
                    ));
                }
            }
        }
        if !c.service_exports && !c.endpoint_slices {
            return Err(format!(
                "no controller named; known: {}",
                Self::NAMES.join(", ")
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::Controllers;

    #[test]
    fn controllers_are_named_one_by_one_and_unknown_names_are_refused() {
        assert_eq!(
            Controllers::parse("serviceexport,endpointslice"),
            Ok(Controllers::default())
        );
        let slices_only = Controllers::parse(" endpointslice ").expect("parses");
        assert!(slices_only.endpoint_slices && !slices_only.service_exports);
        let e = Controllers::parse("serviceexport,endpointslices").expect_err("typo");
        assert!(e.contains("\"endpointslices\""), "{e}");
        assert!(Controllers::parse("").is_err());
    }
}
