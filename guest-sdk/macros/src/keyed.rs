//! The keyed operators: `#[operator(process)]`, `#[operator(co_process)]`,
//! `#[operator(right)]` and `#[operator(timer)]` (a
//! function of a record or a timer and state handles, bound to the handles
//! the host scopes to the current key), `#[operator(window)]` and
//! `#[operator(aggregate)]`; and `#[operator(join)]`.

use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote, quote_spanned};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, ItemImpl, Meta, Pat, Token, Type};

const HANDLES: &str =
    "`&mut ValueState<T>`, `&mut ListState<T>`, `&mut MapState<K, V>`, `&mut Timers` or `&mut Emit`";

/// The hidden wrapper of `f`: `fn(first, &mut Emit) -> Result<()>`, each
/// handle made from its parameter's name.
fn wrapper(func: &ItemFn, first: Tokens, signature: &str) -> syn::Result<(Ident, Tokens)> {
    let sig = &func.sig;
    if sig.asyncness.is_some()
        || !sig.generics.params.is_empty()
        || sig.variadic.is_some()
        || sig.inputs.is_empty()
    {
        return Err(syn::Error::new(
            sig.span(),
            format!("a keyed operator function is a plain, non-async, non-generic fn: {signature}"),
        ));
    }
    let mut args = Vec::new();
    let mut states = String::new();
    for input in sig.inputs.iter().skip(1) {
        let FnArg::Typed(arg) = input else {
            return Err(syn::Error::new(
                input.span(),
                "an operator function takes no `self`",
            ));
        };
        let (Pat::Ident(name), Type::Reference(r)) = (&*arg.pat, &*arg.ty) else {
            return Err(syn::Error::new(
                arg.span(),
                format!("each parameter after the first is `name: ` one of {HANDLES}"),
            ));
        };
        if r.mutability.is_none() {
            return Err(syn::Error::new(
                r.span(),
                format!("take the handle as `&mut`: one of {HANDLES}"),
            ));
        }
        let elem = &r.elem;
        let last = match &**elem {
            Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let is_emit = last.as_deref() == Some("Emit");
        let state_name = name.ident.to_string();
        if !is_emit && last.as_deref() != Some("Timers") {
            states.push_str(&state_name);
            states.push('\n');
        }
        args.push(if is_emit {
            quote!(__emit)
        } else {
            quote_spanned!(elem.span()=> &mut <#elem as ::mailer_sdk::Named>::named(#state_name))
        });
    }
    let f = &sig.ident;
    let wrapper = format_ident!("__mailer_{}", f);
    let call = quote_spanned!(f.span()=> #f(first, #(#args),*));
    let declared = declare_states(f, &states);
    Ok((
        wrapper.clone(),
        quote! {
            #[doc(hidden)]
            #[allow(dead_code)]
            fn #wrapper(first: #first, __emit: &mut ::mailer_sdk::Emit) -> ::mailer_sdk::Result<()> {
                #call
            }
            #declared
        },
    ))
}

/// The states function `f` uses (`names`, each ending in a newline),
/// declared in the component's custom section `mailer-states`: the host
/// checks the manifest's `state_ttl` names against them. The linker joins
/// the sections of every function into one.
fn declare_states(f: &Ident, names: &str) -> Tokens {
    if names.is_empty() {
        return Tokens::new();
    }
    let bytes = proc_macro2::Literal::byte_string(names.as_bytes());
    let len = names.len();
    let name = format_ident!("__MAILER_STATES_OF_{}", f.to_string().to_uppercase());
    quote! {
        #[cfg(target_arch = "wasm32")]
        #[used]
        #[unsafe(link_section = "mailer-states")]
        #[doc(hidden)]
        static #name: [u8; #len] = *#bytes;
    }
}

/// `#[operator(timer)]`.
pub fn timer(func: &ItemFn) -> syn::Result<Tokens> {
    let (_, wrapper) = wrapper(
        func,
        quote!(::mailer_sdk::Timer),
        "fn(Timer, handles…) -> Result<()>",
    )?;
    Ok(wrapper)
}

/// `#[operator(right)]`: the right input's function of a co-process
/// operator.
pub fn right(func: &ItemFn) -> syn::Result<Tokens> {
    let (_, wrapper) = wrapper(
        func,
        quote!(::mailer_sdk::Record),
        "fn(Record, handles…) -> Result<()>",
    )?;
    Ok(wrapper)
}

/// The hidden wrapper of the function `name = f` names (made by its own
/// `#[operator(timer)]` or `#[operator(right)]`).
fn named_wrapper(value: &Expr, what: &str) -> syn::Result<Tokens> {
    let Expr::Path(p) = value else {
        return Err(syn::Error::new(
            value.span(),
            format!("names the `#[operator({what})]` function"),
        ));
    };
    let mut path = p.path.clone();
    let last = path.segments.last_mut().expect("a path has a segment");
    last.ident = format_ident!("__mailer_{}", last.ident, span = last.ident.span());
    Ok(quote!(#path))
}

/// `#[operator(process)]` and `#[operator(process, on_timer = f)]`; with
/// `co`, `#[operator(co_process, right = g)]` (and `on_timer = f`).
pub fn process(args: &Punctuated<Meta, Token![,]>, func: &ItemFn, co: bool) -> syn::Result<Tokens> {
    let mut on_timer = quote!(::mailer_sdk::__private::no_timer);
    let mut on_right = None;
    let mut migrate = None;
    for arg in args.iter().skip(1) {
        match arg {
            Meta::NameValue(nv) if nv.path.is_ident("on_timer") => {
                on_timer = named_wrapper(&nv.value, "timer")?;
            }
            Meta::NameValue(nv) if co && nv.path.is_ident("right") => {
                on_right = Some(named_wrapper(&nv.value, "right")?);
            }
            Meta::NameValue(nv) if nv.path.is_ident("migrate") => match &nv.value {
                Expr::Path(p) => migrate = Some(p.path.clone()),
                other => {
                    return Err(syn::Error::new(
                        other.span(),
                        "names the migration function: fn(from_version: u32, state: &str, value: Vec<u8>) -> Result<Vec<u8>>",
                    ));
                }
            },
            Meta::NameValue(nv) if nv.path.is_ident("state_version") => {
                state_version(args)?;
            }
            other => {
                let expected = match co {
                    true => {
                        "expected `right = <the #[operator(right)] function>`, `on_timer = <the #[operator(timer)] function>`, `state_version = <n>` or `migrate = <function>`"
                    }
                    false => {
                        "expected `on_timer = <the #[operator(timer)] function>`, `state_version = <n>` or `migrate = <function>`"
                    }
                };
                return Err(syn::Error::new(other.span(), expected));
            }
        }
    }
    if migrate.is_some() && state_version(args)?.is_none_or(|v| v < 2) {
        return Err(syn::Error::new(
            args.span(),
            "a `migrate` function brings state written by older versions to this one's: declare this version's `state_version = <n>`, 2 or more",
        ));
    }
    if co && on_right.is_none() {
        return Err(syn::Error::new(
            args.span(),
            "a co_process operator names its right input's function: `#[operator(co_process, right = g)]`, with `#[operator(right)]` on `g`",
        ));
    }
    let (wrapper, wrapper_fn) = wrapper(
        func,
        quote!(::mailer_sdk::Record),
        "fn(Record, handles…) -> Result<()>",
    )?;
    let vis = &func.vis;
    let f = &func.sig.ident;
    let operator_fn = format_ident!("{}_operator", f);
    let p = quote!(::mailer_sdk::__private);
    let (module, doc) = match (co, migrate.is_some()) {
        (true, true) => (
            quote!(migrating_co_process),
            format!("The `{f}` co-process operator, for `mailer_sdk::testing::Harness::co_process`."),
        ),
        (false, true) => (
            quote!(migrating_process),
            format!("The `{f}` process operator, for `mailer_sdk::testing::Harness`."),
        ),
        (true, false) => (
            quote!(co_process),
            format!("The `{f}` co-process operator, for `mailer_sdk::testing::Harness::co_process`."),
        ),
        (false, false) => (
            quote!(process),
            format!("The `{f}` process operator, for `mailer_sdk::testing::Harness`."),
        ),
    };
    let t = quote!(#p::#module::mailer::plugin::types);
    let domain = quote!(#p::#module::mailer::plugin::timers::TimeDomain);
    let (operator, exports) = match &on_right {
        None => (
            quote!(::mailer_sdk::ProcessOperator { on_record: #wrapper, on_timer: #on_timer }),
            quote! {
                fn on_record(input: #t::Record) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    __record(#wrapper, input)
                }
                fn process_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #p::process_batch(#wrapper, &input)
                }
            },
        ),
        Some(right) => (
            quote!(::mailer_sdk::CoProcessOperator { on_left: #wrapper, on_right: #right, on_timer: #on_timer }),
            quote! {
                fn on_left(input: #t::Record) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    __record(#wrapper, input)
                }
                fn on_right(input: #t::Record) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    __record(#right, input)
                }
                fn co_process_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #p::co_process_batch(#wrapper, #right, &input)
                }
            },
        ),
    };
    let export = format_ident!("export_{}", module.to_string());
    let export = quote!(#p::#module::#export!(__MailerOperator););
    let (migrate_export, migrate_checked) = match &migrate {
        None => (Tokens::new(), Tokens::new()),
        Some(m) => (
            quote! {
                fn migrate(
                    from_version: u32,
                    name: ::std::string::String,
                    value: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, #t::Error> {
                    #m(from_version, &name, value).map_err(::core::convert::Into::into)
                }
            },
            quote_spanned! {m.span()=>
                #[cfg(not(target_arch = "wasm32"))]
                const _: fn(u32, &str, ::std::vec::Vec<u8>) -> ::mailer_sdk::Result<::std::vec::Vec<u8>> = #m;
            },
        ),
    };
    let operator_ty = match co {
        true => quote!(::mailer_sdk::CoProcessOperator),
        false => quote!(::mailer_sdk::ProcessOperator),
    };
    Ok(quote! {
        #wrapper_fn

        #[doc = #doc]
        #[allow(dead_code)]
        #vis fn #operator_fn() -> #operator_ty {
            #operator
        }

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __MailerOperator;
            fn __records(
                result: ::mailer_sdk::Result<()>,
                out: ::mailer_sdk::Emit,
            ) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                result.map_err(#t::Error::from)?;
                Ok(out.into_records().into_iter().map(::core::convert::Into::into).collect())
            }
            fn __record(
                f: fn(::mailer_sdk::Record, &mut ::mailer_sdk::Emit) -> ::mailer_sdk::Result<()>,
                input: #t::Record,
            ) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                let rec: ::mailer_sdk::Record = input.into();
                let mut out = ::mailer_sdk::Emit::at(rec.timestamp);
                let result = f(rec, &mut out);
                __records(result, out)
            }
            impl #p::#module::Guest for __MailerOperator {
                #exports
                #migrate_export
                fn on_timer(
                    key: ::core::option::Option<::std::vec::Vec<u8>>,
                    domain: #domain,
                    at: i64,
                ) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    let timer = ::mailer_sdk::Timer { key, domain: domain.into(), at };
                    let mut out = ::mailer_sdk::Emit::at(at);
                    let result = (#on_timer)(timer, &mut out);
                    __records(result, out)
                }
            }
            #export
        };
        #migrate_checked
    })
}

/// The `state_version = <n>` of a process or co-process operator's
/// attribute, if it gives one.
pub fn state_version(args: &Punctuated<Meta, Token![,]>) -> syn::Result<Option<u32>> {
    for arg in args.iter().skip(1) {
        if let Meta::NameValue(nv) = arg
            && nv.path.is_ident("state_version")
        {
            let invalid = || {
                syn::Error::new(
                    nv.value.span(),
                    "`state_version` is a whole number, 1 or more (the version of the shape of the state this plugin writes)",
                )
            };
            let Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(n),
                ..
            }) = &nv.value
            else {
                return Err(invalid());
            };
            return match n.base10_parse::<u32>() {
                Ok(v) if v >= 1 => Ok(Some(v)),
                _ => Err(invalid()),
            };
        }
    }
    Ok(None)
}

/// `#[operator(join)]`: `fn(Option<Record>, Option<Record>) -> Result<Vec<Record>>`.
pub fn join(func: &ItemFn) -> syn::Result<Tokens> {
    let sig = &func.sig;
    if sig.inputs.len() != 2 {
        return Err(syn::Error::new(
            sig.inputs.span(),
            "a `join` operator takes 2 arguments: fn(Option<Record>, Option<Record>) -> Result<Vec<Record>>",
        ));
    }
    let f = &sig.ident;
    let p = quote!(::mailer_sdk::__private);
    let t = quote!(#p::join::mailer::plugin::types);
    let checked = quote_spanned!(f.span()=> #p::join_batch(#f, &input));
    Ok(quote! {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __MailerOperator;
            impl #p::join::Guest for __MailerOperator {
                fn join(
                    left: ::core::option::Option<#t::Record>,
                    right: ::core::option::Option<#t::Record>,
                ) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    #f(left.map(::core::convert::Into::into), right.map(::core::convert::Into::into))
                        .map(|out| out.into_iter().map(::core::convert::Into::into).collect())
                        .map_err(::core::convert::Into::into)
                }
                fn join_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #checked
                }
            }
            #p::join::export_join!(__MailerOperator);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            // Type-checks the signature on the host target too.
            let _ = |input: ::std::vec::Vec<u8>| #checked;
        };
    })
}

/// `#[operator(window)]`: `fn(Option<&[u8]>, Window, Vec<Record>, &mut Emit) -> Result<()>`.
pub fn window(func: &ItemFn) -> syn::Result<Tokens> {
    let sig = &func.sig;
    if sig.inputs.len() != 4 {
        return Err(syn::Error::new(
            sig.inputs.span(),
            "a `window` operator takes 4 arguments: fn(Option<&[u8]>, Window, Vec<Record>, &mut Emit) -> Result<()>",
        ));
    }
    let f = &sig.ident;
    let p = quote!(::mailer_sdk::__private);
    let t = quote!(#p::window::mailer::plugin::types);
    let checked = quote_spanned!(f.span()=> #p::window_batch(#f, &input));
    Ok(quote! {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __MailerOperator;
            impl #p::window::Guest for __MailerOperator {
                fn window(
                    key: ::core::option::Option<::std::vec::Vec<u8>>,
                    bounds: #p::window::Bounds,
                    input: ::std::vec::Vec<#t::Record>,
                ) -> ::core::result::Result<::std::vec::Vec<#t::Record>, #t::Error> {
                    let w = ::mailer_sdk::Window { start: bounds.start, end: bounds.end };
                    let mut out = ::mailer_sdk::Emit::at(w.max_timestamp());
                    let records = input.into_iter().map(::core::convert::Into::into).collect();
                    #f(key.as_deref(), w, records, &mut out).map_err(#t::Error::from)?;
                    Ok(out.into_records().into_iter().map(::core::convert::Into::into).collect())
                }
                fn window_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #checked
                }
            }
            #p::window::export_window!(__MailerOperator);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            // Type-checks the signature on the host target too.
            let _ = |input: ::std::vec::Vec<u8>| #checked;
        };
    })
}

/// `#[operator(aggregate)]` on `impl Aggregate for T`.
pub fn aggregate(block: &ItemImpl) -> syn::Result<Tokens> {
    let is_aggregate = block
        .trait_
        .as_ref()
        .is_some_and(|(_, path, _)| path.segments.last().is_some_and(|s| s.ident == "Aggregate"));
    if !is_aggregate {
        return Err(syn::Error::new(
            block.span(),
            "`#[operator(aggregate)]` goes on an `impl Aggregate for YourAccumulator` block",
        ));
    }
    let ty = &block.self_ty;
    let p = quote!(::mailer_sdk::__private);
    let t = quote!(#p::aggregate::mailer::plugin::types);
    let checked = quote_spanned!(ty.span()=> #p::aggregate_create::<#ty>());
    Ok(quote! {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            struct __MailerOperator;
            impl #p::aggregate::Guest for __MailerOperator {
                fn create() -> ::std::vec::Vec<u8> {
                    #checked
                }
                fn add(
                    accumulator: ::std::vec::Vec<u8>,
                    input: #t::Record,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, #t::Error> {
                    #p::aggregate_add::<#ty>(&accumulator, input.into()).map_err(#t::Error::from)
                }
                fn merge(
                    a: ::std::vec::Vec<u8>,
                    b: ::std::vec::Vec<u8>,
                ) -> ::core::result::Result<::std::vec::Vec<u8>, #t::Error> {
                    #p::aggregate_merge::<#ty>(&a, &b).map_err(#t::Error::from)
                }
                fn finish(accumulator: ::std::vec::Vec<u8>) -> ::core::result::Result<::std::vec::Vec<u8>, #t::Error> {
                    #p::aggregate_finish::<#ty>(&accumulator).map_err(#t::Error::from)
                }
                fn add_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #p::aggregate_add_batch::<#ty>(&input)
                }
                fn finish_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    #p::aggregate_finish_batch::<#ty>(&input)
                }
            }
            #p::aggregate::export_aggregate!(__MailerOperator);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = {
            // Type-checks the accumulator on the host target too.
            let _ = || #checked;
        };
    })
}
