//! The `#[operator]` attribute of `mailer-sdk`: turns one function into the
//! exports of a mailer plugin world. See the `mailer-sdk` docs for the kinds
//! and the signature each expects.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Ident, ItemFn, ItemImpl, Meta, Token, parse_macro_input};

mod keyed;

/// One operator kind: its attribute name, world module, and the number of
/// arguments its function takes.
struct Kind {
    name: &'static str,
    arity: usize,
    signature: &'static str,
}

const KINDS: [Kind; 4] = [
    Kind {
        name: "map",
        arity: 1,
        signature: "fn(Record) -> Result<Record>",
    },
    Kind {
        name: "filter",
        arity: 1,
        signature: "fn(&Record) -> Result<bool> (or `RecordView`)",
    },
    Kind {
        name: "flat_map",
        arity: 1,
        signature: "fn(Record) -> Result<Vec<Record>>",
    },
    Kind {
        name: "reduce",
        arity: 2,
        signature: "fn(Option<&[u8]>, Record) -> Result<Vec<u8>> (or `&Record`, or `RecordView`)",
    },
];

/// Makes this function the plugin's operator: `#[operator(map)]`,
/// `#[operator(filter)]`, `#[operator(flat_map)]`, `#[operator(reduce)]`,
/// `#[operator(process)]` (optionally `#[operator(process, on_timer = f)]`,
/// and `state_version = n, migrate = m` for a state whose shape changed),
/// `#[operator(timer)]` (the timer function of a process operator),
/// `#[operator(co_process, right = g)]` with `#[operator(right)]` on `g`
/// (a keyed process function of two inputs), `#[operator(join)]`,
/// `#[operator(window)]`, or `#[operator(aggregate)]` on an
/// `impl Aggregate for T` block.
#[proc_macro_attribute]
pub fn operator(attr: TokenStream, item: TokenStream) -> TokenStream {
    let args = parse_macro_input!(attr with Punctuated::<Meta, Token![,]>::parse_terminated);
    if matches!(args.first(), Some(Meta::Path(p)) if p.is_ident("aggregate")) && args.len() == 1 {
        let block = parse_macro_input!(item as ItemImpl);
        return match keyed::aggregate(&block) {
            Ok(exports) => quote!(#block #exports ::mailer_sdk::__plugin_version!();).into(),
            Err(e) => {
                let e = e.to_compile_error();
                quote!(#block #e).into()
            }
        };
    }
    let func = parse_macro_input!(item as ItemFn);
    let expanded = match args.first() {
        Some(Meta::Path(p)) if p.is_ident("process") => keyed::process(&args, &func, false),
        Some(Meta::Path(p)) if p.is_ident("co_process") => keyed::process(&args, &func, true),
        Some(Meta::Path(p)) if p.is_ident("timer") && args.len() == 1 => keyed::timer(&func),
        Some(Meta::Path(p)) if p.is_ident("right") && args.len() == 1 => keyed::right(&func),
        Some(Meta::Path(p)) if p.is_ident("join") && args.len() == 1 => keyed::join(&func),
        Some(Meta::Path(p)) if p.is_ident("window") && args.len() == 1 => keyed::window(&func),
        Some(Meta::Path(p)) if args.len() == 1 && p.get_ident().is_some() => {
            expand(p.get_ident().expect("checked"), &func)
        }
        _ => Err(syn::Error::new(
            args.span(),
            "expected an operator kind: map, filter, flat_map, reduce, process, co_process, right, timer, window, aggregate or join",
        )),
    };
    // A timer or right function belongs to a process operator, which names
    // the version once.
    let is_timer = matches!(args.first(), Some(Meta::Path(p)) if p.is_ident("timer") || p.is_ident("right"));
    let version = match keyed::state_version(&args) {
        _ if is_timer => None,
        Ok(Some(v)) => {
            let v = proc_macro2::Literal::u32_unsuffixed(v);
            Some(quote!(::mailer_sdk::__plugin_version!(#v);))
        }
        _ => Some(quote!(::mailer_sdk::__plugin_version!();)),
    };
    match expanded {
        Ok(exports) => quote!(#func #exports #version).into(),
        Err(e) => {
            let e = e.to_compile_error();
            quote!(#func #e).into()
        }
    }
}

fn expand(kind_ident: &Ident, func: &ItemFn) -> syn::Result<Tokens> {
    let names: Vec<&str> = KINDS.iter().map(|k| k.name).collect();
    let kind = KINDS.iter().find(|k| kind_ident == k.name).ok_or_else(|| {
        syn::Error::new(
            kind_ident.span(),
            format!(
                "unknown operator kind `{kind_ident}`; expected one of: {}, process, co_process, right, timer, window, aggregate, join",
                names.join(", ")
            ),
        )
    })?;
    let sig = &func.sig;
    if sig.asyncness.is_some() || !sig.generics.params.is_empty() || sig.variadic.is_some() {
        return Err(syn::Error::new(
            sig.span(),
            format!(
                "an operator function is a plain, non-async, non-generic fn: {}",
                kind.signature
            ),
        ));
    }
    if sig.inputs.len() != kind.arity {
        return Err(syn::Error::new(
            sig.inputs.span(),
            format!(
                "a `{}` operator takes {} argument(s): {}",
                kind.name, kind.arity, kind.signature
            ),
        ));
    }
    let f = &sig.ident;
    let module = Ident::new(kind.name, Span::call_site());
    let p = quote!(::mailer_sdk::__private);
    let t = quote!(#p::#module::mailer::plugin::types);
    let batch = Ident::new(&format!("{}_batch", kind.name), Span::call_site());
    let export = Ident::new(&format!("export_{}", kind.name), Span::call_site());
    // The call is spanned on the user's function so that a wrong signature is
    // reported there.
    // How the function takes its record: a filter or reduce function taking
    // a `RecordView` reads records in place; a reduce function taking
    // `&Record` gets records the SDK reuses.
    let record_ty = match sig.inputs.last() {
        Some(syn::FnArg::Typed(arg)) => Some(&*arg.ty),
        _ => None,
    };
    let by_view = matches!(kind.name, "filter" | "reduce")
        && matches!(record_ty, Some(syn::Type::Path(p)) if p.path.segments.last().is_some_and(|s| s.ident == "RecordView"));
    let by_ref = kind.name == "reduce" && matches!(record_ty, Some(syn::Type::Reference(_)));
    let batch_loop = match (by_view, by_ref) {
        (true, _) => Ident::new(&format!("{}_batch_view", kind.name), Span::call_site()),
        (false, true) => Ident::new("reduce_batch_by_ref", Span::call_site()),
        (false, false) => batch.clone(),
    };
    let checked = quote_spanned!(f.span()=> #p::#batch_loop(#f, &input));
    let record_arg = match (by_view, by_ref || kind.name == "filter") {
        (true, _) => quote!(::mailer_sdk::Record::from(input).view()),
        (false, true) => quote!(&input.into()),
        (false, false) => quote!(input.into()),
    };
    let one = match kind.name {
        "map" => quote! {
            fn map(input: #t::Record) -> ::core::result::Result<#t::Record, #t::Error> {
                #f(input.into()).map(Into::into).map_err(Into::into)
            }
        },
        "filter" => quote! {
            fn filter(input: #t::Record) -> ::core::result::Result<bool, #t::Error> {
                #f(#record_arg).map_err(Into::into)
            }
        },
        "flat_map" => quote! {
            fn flat_map(input: #t::Record) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                #f(input.into())
                    .map(|out| out.into_iter().map(Into::into).collect())
                    .map_err(Into::into)
            }
        },
        _ => quote! {
            fn reduce(
                accumulator: ::core::option::Option<::std::vec::Vec<u8>>,
                input: #t::Record,
            ) -> ::core::result::Result<::std::vec::Vec<u8>, #t::Error> {
                #f(accumulator.as_deref(), #record_arg).map_err(Into::into)
            }
        },
    };
    Ok(quote! {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __MailerOperator;
            impl #p::#module::Guest for __MailerOperator {
                #one
                fn #batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #checked
                }
            }
            #p::#module::#export!(__MailerOperator);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            // Type-checks the signature on the host target too.
            let _ = |input: ::std::vec::Vec<u8>| #checked;
        };
    })
}
