//! The generated bindings, one module per world, and the conversions between
//! their record types and [`crate::Record`].

macro_rules! world {
    ($module:ident, $world:literal, $bindings:literal, $export:literal) => {
        pub mod $module {
            wit_bindgen::generate!({
                world: $world,
                path: "../wit",
                default_bindings_module: $bindings,
                pub_export_macro: true,
                export_macro_name: $export,
                runtime_path: "mailer_sdk::__private::wit_bindgen::rt",
            });

            use self::mailer::plugin::types as t;

            impl From<t::Record> for crate::Record {
                fn from(r: t::Record) -> Self {
                    Self {
                        key: r.key,
                        value: r.value,
                        timestamp: r.timestamp,
                        headers: r.headers.into_iter().map(|h| (h.name, h.value)).collect(),
                    }
                }
            }

            impl From<crate::Record> for t::Record {
                fn from(r: crate::Record) -> Self {
                    Self {
                        key: r.key,
                        value: r.value,
                        timestamp: r.timestamp,
                        headers: r
                            .headers
                            .into_iter()
                            .map(|(name, value)| t::Header { name, value })
                            .collect(),
                    }
                }
            }

            impl From<crate::Error> for t::Error {
                fn from(e: crate::Error) -> Self {
                    Self {
                        message: e.message().to_owned(),
                    }
                }
            }
        }
    };
}

world!(map, "%map", "mailer_sdk::__private::map", "export_map");
world!(filter, "filter", "mailer_sdk::__private::filter", "export_filter");
world!(
    flat_map,
    "flat-map",
    "mailer_sdk::__private::flat_map",
    "export_flat_map"
);
world!(reduce, "reduce", "mailer_sdk::__private::reduce", "export_reduce");
world!(
    process,
    "process",
    "mailer_sdk::__private::process",
    "export_process"
);

world!(window, "window", "mailer_sdk::__private::window", "export_window");
world!(join, "join", "mailer_sdk::__private::join", "export_join");
world!(
    co_process,
    "co-process",
    "mailer_sdk::__private::co_process",
    "export_co_process"
);
world!(
    aggregate,
    "aggregate",
    "mailer_sdk::__private::aggregate",
    "export_aggregate"
);

/// The time domain of the process and co-process worlds' timers (each
/// world's bindings have their own type).
macro_rules! time_domain {
    ($($module:ident),*) => {$(
        impl From<$module::mailer::plugin::timers::TimeDomain> for crate::TimeDomain {
            fn from(d: $module::mailer::plugin::timers::TimeDomain) -> Self {
                use $module::mailer::plugin::timers::TimeDomain as Wit;
                match d {
                    Wit::EventTime => Self::EventTime,
                    Wit::ProcessingTime => Self::ProcessingTime,
                }
            }
        }
    )*};
}

world!(
    migrating_process,
    "migrating-process",
    "mailer_sdk::__private::migrating_process",
    "export_migrating_process"
);
world!(
    migrating_co_process,
    "migrating-co-process",
    "mailer_sdk::__private::migrating_co_process",
    "export_migrating_co_process"
);

time_domain!(process, co_process, migrating_process, migrating_co_process);
