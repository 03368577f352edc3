//! The plain runtime configuration. `cli.rs` and the config file loader produce it; nothing else
//! knows where a setting came from. Each scalar setting is one entry of the table in
//! `settings.rs`.

pub mod file;
pub mod settings;
pub mod value;

pub use settings::Setting;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreConfig {
    /// One SQLite file in the data directory (the embedded default).
    Sqlite,
    /// `clickhouse://user:pass@host:8123/db`, through the official client over HTTP.
    ClickHouse {
        url: String,
        user: String,
        password: String,
        database: String,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `Config`, its defaults and `SETTINGS` from the table in `settings.rs`.
macro_rules! declare {
    ($(
        $(#[doc = $doc:literal])*
        $(#[arg $arg:tt])*
        $name:ident: $ty:ty = $default:tt {
            file: $file:ty,
            env: $env:literal,
            value_name: $value_name:literal,
            parse: $parse:expr $(,)?
        }
    )*) => {
        /// Every setting of `reckon serve`, resolved. The scalar ones are declared in
        /// `settings.rs`, with their defaults; the tables (`[[notify]]`, `[auth]`) come from the
        /// config file only.
        #[derive(Clone, Debug, PartialEq, Eq)]
        pub struct Config {
            $(
                $(#[doc = $doc])*
                pub $name: $ty,
            )*
            /// `[[notify]]` targets (config file only): Alertmanager and signed webhooks.
            pub notify: Vec<crate::notify::Target>,
            /// `[auth]` and its `[[auth.token]]` entries (config file only). No tokens: open
            /// access.
            pub auth: crate::auth::AuthConfig,
        }

        impl Default for Config {
            fn default() -> Self {
                Config {
                    $($name: settings::initial!(SETTINGS.$name, $default),)*
                    notify: Vec::new(),
                    auth: crate::auth::AuthConfig::default(),
                }
            }
        }

        /// One descriptor per scalar setting, under its name: `SETTINGS.data_dir.env`.
        pub struct Settings {
            $(pub $name: Setting<$ty>,)*
        }

        /// The scalar settings' descriptors (`settings.rs`).
        pub const SETTINGS: Settings = Settings {
            $(
                $name: Setting {
                    key: stringify!($name),
                    env: $env,
                    value_name: $value_name,
                    default: settings::default_text!($default),
                    about: concat!($($doc, "\n"),*),
                    parse: settings::parser!($default, $parse),
                },
            )*
        };

        impl Settings {
            /// Every setting's key and variable, in the table's order.
            pub fn vars(&self) -> Vec<(&'static str, &'static str)> {
                vec![$((self.$name.key, self.$name.env)),*]
            }
        }
    };
}

settings::with_settings!(declare);
