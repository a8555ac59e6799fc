//! `mailer new-plugin`: a plugin project of a world, in Rust, Python or
//! JavaScript, that builds and passes its own test.

use anyhow::Result;
use clap::ValueEnum;
use mailer::plugin::World;
use mailer::scaffold::{self, Language};
use std::path::PathBuf;

/// The arguments of `mailer new-plugin`.
#[derive(clap::Args)]
pub struct Args {
    /// The plugin's language.
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The plugin's world: what the manifest runs it as.
    #[arg(long, default_value = "map", value_parser = world_parser())]
    pub world: World,
    /// The plugin's name (and its folder's).
    pub name: String,
    /// Where to put the folder.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// The `guest-sdk` folder a Rust plugin depends on (default: the
    /// one of the source tree this binary was built from).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Lang {
    /// Rust with `mailer-sdk`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
}

/// Makes the project of `args`; prints its folder.
pub fn run(args: Args) -> Result<()> {
    let Args {
        lang,
        world,
        name,
        dir,
        sdk,
    } = args;
    let language = match lang {
        Lang::Rust => Language::Rust,
        Lang::Python => Language::Python,
        Lang::Js => Language::Js,
    };
    let sdk = sdk.unwrap_or_else(scaffold::built_in_sdk);
    let sdk = std::path::absolute(&sdk).unwrap_or(sdk);
    let project = scaffold::scaffold(language, world, &name, &dir, &sdk)?;
    println!("{}", project.display());
    Ok(())
}

/// `--world`: a world by its WIT name.
fn world_parser() -> impl clap::builder::TypedValueParser<Value = World> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(World::ALL.map(World::wit_name))
        .map(|name| World::from_wit_name(&name).expect("one of the possible values"))
}
